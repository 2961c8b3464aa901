"""Your own training loop under a power cap: `undercap.capped(...)`.

    with undercap.open_device("sim:jetson-nano") as device, undercap.capped(
        device, "run-out/selection.json", model=model, input_shape=(3, 32, 32),
        target_accuracy=0.9,
    ) as cap:
        opt = torch.optim.Adam(model.parameters(), lr=cap.lr(1e-3))
        loader = DataLoader(train_set, batch_size=cap.batch_size, shuffle=True)
        while not cap.done:
            for x, y in loader:
                ...forward, backward, opt.step()...
                cap.step(len(x))          # device time, energy, the power guard
            with cap.paused():            # evaluation is not training time
                accuracy = evaluate(model)
            cap.report(accuracy)          # done once the target is reached
    print(cap.result())

`cap.lr(base_lr)` scales a rate by sqrt(b / b_max), as undercap's own training does
(Sec. 4.2); a simulated device needs the model and its input shape (or a Workload) to
run its clock. See docs/guides/own-code.md.

`Capped`, the handle, is what every loop trains with: undercap's own (train/runner.py)
drives one exactly as a loop of yours does, and it is the one place a device session
(train/session/) is made.
"""

import contextlib
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from undercap import defaults
from undercap.artifacts.selection import Selection
from undercap.artifacts.train_result import RunNotes, RunTotals
from undercap.artifacts.workload import Workload
from undercap.devices.base import Device
from undercap.errors import UndercapError, reject_removed
from undercap.models.outputs import batch_len
from undercap.models.recipe import lr_scale
from undercap.train.evallog import EvalLog, eval_row
from undercap.train.session import Session
from undercap.train.session.follow import Reselector
from undercap.train.spec import TrainSpec, chosen


@dataclass(frozen=True)
class _Looped:
    """What only a loop of your own reports (beside RunTotals)."""

    samples: int
    curve: Tuple[Tuple[int, float], ...]  # (samples, accuracy) per report
    device: str


@dataclass(frozen=True)
class CappedResult(RunNotes, _Looped, RunTotals):
    """What a capped loop did (times on the device's clock; virtual if simulated):
    the same device-side totals as undercap's own TrainResult, and its curve."""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class CappedWarning(UserWarning):
    """A capped loop is probably miscounting (no step(), evaluation not paused)."""


class Capped:
    """The handle a loop trains with (module docstring): `step()` after every optimizer
    step, evaluation inside `paused()`, `report()` after it. `saved`/`samples`: a
    checkpoint's session state and the samples trained before (a resumed run)."""

    def __init__(
        self,
        device: Device,
        spec: TrainSpec,
        workload: Optional[Workload],
        *,
        sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
        reselector: Optional[Reselector] = None,
        eval_log: Optional[EvalLog] = None,
        switch_batch: bool = True,
        saved: Optional[Dict[str, Any]] = None,
        samples: int = 0,
        cuda_sync: Any = None,
    ) -> None:
        if device.is_simulated and workload is None:
            raise UndercapError(
                f"{device.name} is simulated: pass model= and input_shape= (or workload=) "
                "so its clock can charge each step"
            )
        self.device, self.spec, self.target_accuracy = device, spec, spec.target_accuracy
        self.session = Session(
            device,
            spec.cap,
            freq_mhz=spec.freq_mhz,
            workload=workload,
            batch_size=spec.batch_size,
            guard_window_s=spec.guard_window_s,
            sample_rate_hz=sample_rate_hz,
            cuda_sync=cuda_sync,
            saved=saved,
            samples=samples,
            reselector=reselector,
            batch_ladder=spec.batch_ladder,
            switch_batch=switch_batch,
        )
        self.eval_log = eval_log
        self.curve: List[Tuple[int, float]] = []
        self.samples_to_target: Optional[int] = None
        self.time_to_accuracy_s: Optional[float] = None
        self.steps = 0
        self.warnings: List[str] = []
        self._paused_since_step = False
        self._totals: Optional[Dict[str, Any]] = None
        self._result: Optional[CappedResult] = None

    def __enter__(self) -> "Capped":
        self.session.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.totals()  # the guard's last judgement and the clock, before restoring it
        finally:
            try:
                self.session.close()  # closes the last segment, stops sampling, restores
            finally:
                if self.eval_log is not None:
                    self.eval_log.close()
        if self.curve and self.steps == 0:
            self._warn(
                "no step() in the whole loop: time, energy and samples are 0; call "
                "cap.step(batch) after every optimizer step"
            )
        self._result = self._finish()

    # --- what the loop asks ---------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """The batch size to use now (a changing cap may switch it after a step)."""
        return self.session.batch_size

    @property
    def freq_mhz(self) -> Optional[float]:
        return self.session.locked_mhz()

    @property
    def power_limit_w(self) -> Optional[float]:
        """The limit in force now."""
        return self.session.power_limit_w

    def lr(self, base_lr: float) -> float:
        """`base_lr` (the learning rate at the estimate's largest batch) scaled by
        sqrt(b / b_max) for the current batch size (paper Sec. 4.2)."""
        return base_lr * lr_scale(self.batch_size, self.spec.max_batch_size or self.batch_size)

    @property
    def samples(self) -> int:
        """Samples trained so far."""
        return self.session.samples

    @property
    def done(self) -> bool:
        return self.samples_to_target is not None

    # --- what the loop tells ----------------------------------------------------------
    def step(self, samples: Any = None) -> Optional[int]:
        """After every optimizer step: it trained on `samples`, a count or the batch
        itself (a tensor, an (x, y) pair, a dict; default the batch size). Returns the
        batch size to train with from the next step when the cap changed it (re-read
        `batch_size` and `lr()`), else None."""
        n = self.batch_size if samples is None else samples_in(samples)
        if n > self.batch_size:
            msg = (
                f"step() trained {n} samples, above the selected batch size {self.batch_size}: "
                "its power and time were never profiled; make batches of cap.batch_size"
            )
            if self.session.follower is None:  # nothing switched it
                raise UndercapError(msg)
            self._warn(msg + " (re-read it after every step under a changing cap)")
        switched = self.session.step(n)
        self.steps += 1
        self._paused_since_step = False
        return switched

    def pause(self) -> None:
        """From here until `resume()`, work (evaluation, saving) is not training."""
        self._paused_since_step = True
        self.session.pause()

    def resume(self) -> None:
        self.session.resume()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A block whose work (evaluation, saving) is not charged to training."""
        self._paused_since_step = True
        with self.session.paused():
            yield

    def report(self, accuracy: float, **extra: float) -> bool:
        """Record an evaluation (`extra`: more numbers for the evaluation log, e.g.
        loss=); True once the target accuracy has been reached."""
        samples, target = self.session.samples, self.target_accuracy
        # the two silent mistakes: no step() (a loop that never steps reports every
        # evaluation at 0 samples) and evaluation charged to training
        at_zero = [a for s, a in self.curve if s == 0]
        if samples == 0 and (at_zero or (target is not None and accuracy >= target)):
            self._warn(
                "report() with no step() before it: if the loop trained, call "
                "cap.step(batch) after every optimizer step (time, energy and samples "
                "are counted there)"
            )
        elif samples > 0 and not self._paused_since_step:
            self._warn(
                "report() after an evaluation outside cap.paused(): its time and energy "
                "were counted as training; evaluate inside `with cap.paused():`"
            )
        self.curve.append((samples, float(accuracy)))
        if self.samples_to_target is None and target is not None and accuracy >= target:
            self.samples_to_target = samples
            self.time_to_accuracy_s = self.session.schedule_s  # training + waiting for power
        if self.eval_log is not None:
            self.eval_log.write(eval_row(self.session, accuracy, extra))
        return self.done

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:  # once per kind of mistake
            self.warnings.append(msg)
            warnings.warn(msg, CappedWarning, stacklevel=3)  # the loop's line

    # --- what happened ---------------------------------------------------------------
    def totals(self) -> Dict[str, Any]:
        """The session's device-side totals (train/session/), judged once: at the end of
        the loop (or now, for a result asked for mid-loop)."""
        if self._totals is None:
            self._totals = self.session.totals()
        return self._totals

    def result(self) -> CappedResult:
        """The totals so far (or of the whole loop, after the `with` block)."""
        return self._result if self._result is not None else self._finish(mid_loop=True)

    def _finish(self, mid_loop: bool = False) -> CappedResult:
        totals = self.session.totals(final=False) if mid_loop else self.totals()
        return CappedResult(
            **{k: v for k, v in totals.items() if k != "warnings"},
            reached=self.done,
            time_to_accuracy_s=self.time_to_accuracy_s,
            samples_to_target=self.samples_to_target,
            steps=self.steps,
            batch_size=self.batch_size,
            samples=self.session.samples,
            curve=tuple(self.curve),
            device=self.device.name,
            warnings=tuple(self.warnings) + totals["warnings"],
        )


def capped(
    device: Device,
    selection: Union[Selection, TrainSpec, str, Path, None] = None,
    *,
    batch_size: Optional[int] = None,
    max_batch_size: Optional[int] = None,
    freq_mhz: Optional[float] = None,
    power_limit_w: Optional[float] = None,
    profile: Any = None,
    relative: Optional[Mapping[int, float]] = None,
    proxies: Any = None,
    target_accuracy: Optional[float] = None,
    model: Any = None,
    input_shape: Optional[Sequence[int]] = None,
    task: Optional[str] = None,
    workload: Optional[Workload] = None,
    guard_window_s: float = defaults.GUARD_WINDOW_S,
    sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
    objective: str = "time",
    energy_budget_j: Optional[float] = None,
    samples_bmax: Optional[float] = None,
    power_schedule: Any = None,
    eval_log: Any = None,
    tensorboard_dir: Any = None,
    switch_batch: bool = True,
    precision: Optional[str] = None,
    **removed: Any,
) -> Capped:
    """A context manager for a training loop of your own under a power cap, run at
    `selection` (a TrainSpec, a Selection or its JSON path), or at Algorithm 1's
    choice under `power_limit_w` from a `profile` and r(b) (`relative`, or several
    `proxies`' median) for the `objective` ("time", "energy", "edp"; `energy_budget_j`
    with `samples_bmax`, N(b_max)), or at `batch_size` and `freq_mhz` as given; `lr()`
    scales from `max_batch_size`. A simulated device needs `model` and `input_shape`
    (or a `workload`; `task` where it cannot be inferred). `power_schedule` (a
    schedule, live source or CSV path: `undercap.train.cap`) re-selects at every change:
    re-read `batch_size` and `lr()` after each step. `eval_log` (.csv, .jsonl),
    `tensorboard_dir`: every `report()`. Read-only clocks are used as found, the guard
    stepping `batch_size` down over the cap (`switch_batch=False` where your loop
    cannot: an excess is then recorded and warned about). `precision` is what your loop
    trains in ("fp32", or "fp16"/"bf16" under torch.autocast; None: the selection's or
    the profile's): the choice is made in it, and a simulated device charges its rate."""
    reject_removed(removed, "capped")
    spec, reselector = chosen(
        selection,
        batch_size=batch_size,
        max_batch_size=max_batch_size,
        freq_mhz=freq_mhz,
        power_limit_w=power_limit_w,
        profile=profile,
        relative=relative,
        proxies=proxies,
        target_accuracy=target_accuracy,
        guard_window_s=guard_window_s,
        objective=objective,
        energy_budget_j=energy_budget_j,
        samples_bmax=samples_bmax,
        power_schedule=power_schedule,
        precision=precision,
    )
    fits = _fitting(device, workload, model, input_shape, task, spec.batch_size, spec.precision)
    return Capped(
        device,
        spec,
        fits,
        sample_rate_hz=sample_rate_hz,
        reselector=reselector,
        eval_log=EvalLog.open(eval_log, tensorboard_dir),
        switch_batch=switch_batch,
    )


def _fitting(
    device: Device,
    workload: Any,
    model: Any,
    input_shape: Any,
    task: Any,
    batch_size: int,
    precision: str = "fp32",
) -> Any:
    """The workload a simulated device charges (counted from `model` in `precision`
    if not given), fitting its memory at `batch_size`, in a precision it runs."""
    from undercap.train.loop.precision import check_precision

    check_precision(device, precision)
    if workload is None and model is not None and device.is_simulated:
        if input_shape is None:
            raise UndercapError("capped(model=...) on a simulated device needs input_shape=")
        from undercap.models.workload import workload_of

        workload = workload_of(model, type(model).__name__, input_shape, task, precision)
    if workload is not None:
        device.check_fits(workload, batch_size)
    return workload


def samples_in(batch: Any) -> int:
    """Samples in `batch`: an int, or a tensor, (x, y) pair or dict of tensors."""
    if isinstance(batch, int):
        return batch
    try:
        return batch_len(batch)
    except TypeError as e:
        raise UndercapError(f"step(): {e}; pass the number of samples") from e
