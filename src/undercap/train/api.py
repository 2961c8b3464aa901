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

The configuration comes from a selection (an artifact or its path: `undercap select
--json`, `run` or `compare` wrote it), or is chosen here from a power limit, a profile
and r(b) (Algorithm 1), or is given as a batch size and a frequency. Entering locks
the frequency (restored on every exit path, Ctrl-C and SIGTERM included), samples
power and runs the guard; `cap.lr(base_lr)` scales a learning rate from the largest
batch of the estimate by sqrt(b / b_max), as undercap's own training does (Sec. 4.2).
A simulated device needs the model and its input shape (or a Workload) to run its
clock; real devices measure the work itself.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

from undercap import defaults
from undercap.artifacts.selection import Selection
from undercap.artifacts.workload import Workload
from undercap.devices.base import Device
from undercap.errors import UndercapError
from undercap.train.cap import cap_from
from undercap.train.evallog import EvalLog, eval_row
from undercap.train.online_loop import look, loop_rule
from undercap.train.race_capped import capped_race
from undercap.train.session import Session, current_freq_mhz
from undercap.train.setting import loop_spec
from undercap.train.spec import TrainSpec


@dataclass(frozen=True)
class CappedResult:
    """What a capped loop did (times on the device's clock; virtual if simulated)."""

    reached: bool
    time_to_accuracy_s: Optional[float]
    train_time_s: float
    samples: int
    samples_to_target: Optional[int]
    energy_j: float
    peak_power_w: float
    mean_power_w: float
    batch_size: int
    freq_mhz_start: Optional[float]
    freq_mhz_final: Optional[float]
    power_limit_w: Optional[float]
    limit_exceeded: bool
    guard_events: tuple[dict[str, Any], ...]
    curve: tuple[tuple[int, float], ...]  # (samples, accuracy) per report
    pause_time_s: float  # waiting for power (a changing cap); part of time_to_accuracy_s
    segments: tuple[dict[str, Any], ...]  # per interval with one configuration
    simulated: bool
    device: str
    steps: int = 0  # step() calls
    warnings: tuple[str, ...] = ()  # misuse the loop should fix (also warned when seen)
    race: Optional[dict[str, Any]] = None  # cap.race()'s record (train/race_capped.py)
    clocks: Optional[str] = None  # "locked", "as found", "read-only: clocks as found"
    online: tuple[dict[str, Any], ...] = ()  # the online rule's switches, made or proposed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CappedWarning(UserWarning):
    """A capped loop is probably miscounting (no step(), evaluation not paused)."""


class Capped:
    """The handle a capped loop works with (see the module docstring)."""

    def __init__(
        self,
        device: Device,
        spec: TrainSpec,
        workload: Optional[Workload],
        sample_rate_hz: float,
        follower: Any = None,
        eval_log: Any = None,
        switch_batch: bool = True,
        online: Any = None,
    ) -> None:
        if device.is_simulated and workload is None:
            raise UndercapError(
                f"{device.name} is simulated: pass model= and input_shape= (or workload=) "
                "so its clock can charge each step"
            )
        self.device, self.spec, self.target_accuracy = device, spec, spec.target_accuracy
        self.session = Session(
            device,
            power_limit_w=spec.power_limit_w,
            freq_mhz=spec.freq_mhz,
            workload=workload,
            guard_window_s=spec.guard_window_s,
            sample_rate_hz=sample_rate_hz,
            follower=follower,
            batch_size=spec.batch_size,
            batch_ladder=spec.batch_ladder,
            switch_batch=switch_batch,
        )
        self.curve: list[tuple[int, float]] = []
        self.samples_to_target: Optional[int] = None
        self.time_to_accuracy_s: Optional[float] = None
        self._result: Optional[CappedResult] = None
        self.steps = 0
        self.warnings: list[str] = []
        self._paused_since_step = False
        self.eval_log = eval_log  # train.evallog.EvalLog or None
        self._race: Any = None  # race_capped.CappedRace when capped(race=True)
        self.online = online  # train/online.OnlineRule when capped(online=True)
        self.proposed: Any = None  # its switch where the loop cannot make it (online_loop)

    def __enter__(self) -> Capped:
        self.session.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        freq_final = current_freq_mhz(self.device)
        try:
            self.session.close()  # closes the last segment, stops sampling, restores clocks
        finally:
            if self.eval_log is not None:
                self.eval_log.close()
        if self.curve and self.steps == 0:
            self._warn(
                "no step() in the whole loop: time, energy and samples are 0; call "
                "cap.step(batch) after every optimizer step"
            )
        if self._result is None:
            self._result = self._finish(freq_final)

    # --- what the loop asks ---------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """The batch size to use now (a changing cap may switch it after a step)."""
        return int(self.session.batch_size or self.spec.batch_size)

    @property
    def freq_mhz(self) -> Optional[float]:
        return self.session.locked_mhz()

    @property
    def power_limit_w(self) -> Optional[float]:
        return self.session.power_limit_w

    def lr(self, base_lr: float) -> float:
        """`base_lr` (the learning rate at the estimate's largest batch) scaled by
        sqrt(b / b_max) for the current batch size (paper Sec. 4.2)."""
        from math import sqrt

        b_max = self.spec.max_batch_size or self.batch_size
        return base_lr * sqrt(self.batch_size / b_max)

    @property
    def samples(self) -> int:
        """Samples trained so far."""
        return self.session.samples

    @property
    def done(self) -> bool:
        return self.samples_to_target is not None

    def race(self) -> Iterator[Any]:
        """The race's lanes for your loop to train, one fork each (train/race_capped.py);
        none without capped(race=True) or when the proxies agree."""
        return iter(()) if self._race is None else self._race.lanes(self.spec.power_limit_w)

    # --- what the loop tells ----------------------------------------------------------
    def step(self, samples: Any = None) -> None:
        """After every optimizer step: it trained on `samples`, a count or the batch
        itself (a tensor, an (x, y) pair, a dict; default the batch size)."""
        n = self.batch_size if samples is None else samples_in(samples)
        if n > self.batch_size:
            self._too_large(n)
        if self.online is not None:  # the batch size this step trained at
            self.online.count(self.batch_size, n)
        self.session.step(n)
        self.steps += 1
        self._paused_since_step = False

    def _too_large(self, n: int) -> None:
        msg = (
            f"step() trained {n} samples, above the selected batch size {self.batch_size}: "
            "its power and time were never profiled; make batches of cap.batch_size"
        )
        if self.session.follower is None and self.online is None:  # nothing switched it
            raise UndercapError(msg)
        self._warn(msg + " (re-read it after every step under a changing cap)")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A block whose work (evaluation, saving) is not charged to training."""
        self._paused_since_step = True
        with self.session.paused():
            yield

    def report(self, accuracy: float, **extra: float) -> bool:
        """Record an evaluation (`extra`: more numbers for the evaluation log, e.g.
        loss=); True once the target accuracy has been reached."""
        samples = self.session.samples
        self._check_report(samples, accuracy)
        lane = None if self._race is None else self._race.current
        if lane is not None:  # a race's fork: its own curve; reaching the target ends all
            lane.report(accuracy)
            if not lane.reached:
                return self._logged(accuracy, extra)
        self.curve.append((samples, float(accuracy)))
        target = self.target_accuracy
        if self.samples_to_target is None and target is not None and accuracy >= target:
            self.samples_to_target = samples
            self.time_to_accuracy_s = self.session.schedule_s  # training + waiting for power
        if self.online is not None:  # train/online_loop.py: may switch b (re-read it)
            look(self, accuracy)
        return self._logged(accuracy, extra)

    def _logged(self, accuracy: float, extra: dict[str, float]) -> bool:
        if self.eval_log is not None:
            self.eval_log.write(eval_row(self.session, accuracy, extra))
        return self.done

    def _check_report(self, samples: int, accuracy: float) -> None:
        """Warn about the two silent mistakes: no step() (a loop that never steps
        reports every evaluation at 0 samples) and evaluation charged to training."""
        target = self.target_accuracy
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

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:  # once per kind of mistake
            self.warnings.append(msg)
            warnings.warn(msg, CappedWarning, stacklevel=4)

    # --- what happened ---------------------------------------------------------------
    def result(self) -> CappedResult:
        """The totals so far (or of the whole loop, after the `with` block)."""
        return self._result if self._result is not None else self._finish()

    def _finish(self, freq_final: Optional[float] = None) -> CappedResult:
        acc = self.session.snapshot()
        t, limit = acc["train_time_s"], self.spec.power_limit_w
        segments = self.session.segments()
        return CappedResult(
            reached=self.done,
            time_to_accuracy_s=self.time_to_accuracy_s,
            train_time_s=t,
            samples=self.session.samples,
            samples_to_target=self.samples_to_target,
            energy_j=acc["energy_j"],
            peak_power_w=acc["peak_w"],
            mean_power_w=acc["energy_j"] / t if t > 0 else 0.0,
            batch_size=self.batch_size,
            freq_mhz_start=self.session.freq_start,
            freq_mhz_final=freq_final if freq_final is not None else current_freq_mhz(self.device),
            power_limit_w=limit,
            limit_exceeded=limit is not None and acc["peak_w"] > limit,
            guard_events=tuple(e.to_dict() for e in self.session.guard.events),
            curve=tuple(self.curve),
            pause_time_s=acc["pause_time_s"],
            segments=segments,
            simulated=self.device.is_simulated,
            device=self.device.name,
            steps=self.steps,
            warnings=tuple(self.warnings) + tuple(self.session.notes),
            clocks=self.session.clocks,
            online=() if self.online is None else tuple(self.online.switches),
            race=None
            if self._race is None or self._race.record is None
            else self._race.record.to_dict(),
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
    race: bool = False,
    race_budget: float = defaults.RACE_FRACTION,
    switch_batch: bool = True,
    online: Any = defaults.ONLINE,
) -> Capped:
    """A context manager for a training loop of your own under a power cap, run at
    `selection` (a TrainSpec, a Selection or its JSON path), or at Algorithm 1's
    choice under `power_limit_w` from a `profile` and r(b) (`relative`, or several
    `proxies`' median) for the `objective` ("time", "energy", "edp"; `energy_budget_j`
    with `samples_bmax`, N(b_max)), or at `batch_size` and `freq_mhz` as given; `lr()`
    scales from `max_batch_size`. A simulated device needs `model` and `input_shape`
    (or a `workload`; `task` where it cannot be inferred). `power_schedule` (a schedule,
    live source or CSV path) re-selects at every change, `online=True` at every `report()`
    from the target's own curve (off by default: it lost to the proxies' median on the
    matrix): re-read `batch_size` and `lr()` after each step. `eval_log` (.csv, .jsonl),
    `tensorboard_dir`: every `report()`. `race=True` races the proxies' candidates first
    (`cap.race()`). Read-only clocks are used as found, the guard stepping `batch_size`
    down over the cap (`switch_batch=False` where your loop cannot: an excess is then
    recorded and warned about)."""
    obj = {"objective": objective, "energy_budget_j": energy_budget_j, "samples_bmax": samples_bmax}
    spec, follower = loop_spec(
        selection, cap=cap_from(power_limit_w, power_schedule), target_accuracy=target_accuracy,
        guard_window_s=guard_window_s, batch_size=batch_size, freq_mhz=freq_mhz,
        max_batch_size=max_batch_size, profile=profile, relative=relative, proxies=proxies,
        objective=obj,
    )  # fmt: skip
    fits = _fitting(device, workload, model, input_shape, task, spec.batch_size)
    log = EvalLog.open(eval_log, tensorboard_dir)
    rule = loop_rule(online, selection, spec.target_accuracy, profile, proxies, race)
    cap = Capped(device, spec, fits, sample_rate_hz, follower, log, switch_batch, rule)
    if race:
        cap._race = capped_race(cap, profile, proxies, follower, samples_bmax, race_budget)
    return cap


def _fitting(
    device: Device, workload: Any, model: Any, input_shape: Any, task: Any, batch_size: int
) -> Any:
    """The workload a simulated device charges (counted from `model` if not given), checked
    to fit the device's memory at `batch_size`."""
    if workload is None and model is not None and device.is_simulated:
        workload = _workload(model, input_shape, task)
    if workload is not None:
        device.check_fits(workload, batch_size)
    return workload


def _workload(model: Any, input_shape: Optional[Sequence[int]], task: Optional[str]) -> Any:
    """What one sample of `model` costs, for a simulated device's clock."""
    if input_shape is None:
        raise UndercapError("capped(model=...) on a simulated device needs input_shape=")
    from undercap.models.workload import workload_of

    return workload_of(model, type(model).__name__, input_shape, task)


def samples_in(batch: Any) -> int:
    """Samples in `batch`: an int, or a tensor, (x, y) pair or dict of tensors."""
    if isinstance(batch, int):
        return batch
    from undercap.models.outputs import batch_len

    try:
        return batch_len(batch)
    except TypeError as e:
        raise UndercapError(f"step(): {e}; pass the number of samples") from e
