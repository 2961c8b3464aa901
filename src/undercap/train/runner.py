"""Training to a target accuracy on the device, under a power cap (`undercap train`).

The loop (loop.Trainer) fine-tunes the pre-trained model exactly as the efficiency
estimate does (sqrt(b / b_max) learning-rate scaling, paper Sec. 4.2), driven like a
loop of your own through a `capped()` handle (api.Capped), whose `step()` may return a
new batch size that the driver here applies. Evaluation, while the handle is paused,
is reported beside training (`eval_time_s`). Checkpoints (checkpoint.py) are written
at step boundaries where no evaluation is pending, or right after one, so a resumed
run repeats the killed one's steps exactly.
"""

import dataclasses
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch

from undercap import defaults
from undercap.artifacts.provenance import provenance
from undercap.artifacts.train_result import TrainResult
from undercap.artifacts.workload import Workload
from undercap.data.base import Splits
from undercap.devices.base import Device
from undercap.errors import CapExceededError, PowerWaitError, UndercapError
from undercap.models.weights import initial_model
from undercap.models.workload import workload_of
from undercap.report.progress import sample_bar
from undercap.train.api import Capped
from undercap.train.cap import Cap, cap_from, changes
from undercap.train.checkpoint import (
    cap_change_note,
    checkpoint_to_resume,
    run_identity,
    save_checkpoint,
)
from undercap.train.evallog import EvalLog
from undercap.train.loop import EvalPoint, LoopResult, Trainer, resolve_torch_device
from undercap.train.loop.evalplan import look_order, plan_for
from undercap.train.loop.precision import on_device
from undercap.train.session.follow import Reselector
from undercap.train.spec import RunOptions, TrainSpec

__all__ = ["RunOptions", "TrainResult", "TrainSpec", "train", "train_on_device"]
#: a PowerWaitError's hint where the cap gave no power before the first step
_NOTHING_TRAINED = (
    "nothing was trained yet: run it again once power is back, or with a longer --max-wait-s"
)


def train(
    device: Device,
    spec: TrainSpec,
    data: Splits,
    options: Optional[RunOptions] = None,
    reselector: Optional[Reselector] = None,
) -> TrainResult:
    """Train `spec` on `data` on `device`, kept as `options` say, through a capped handle
    that locks the clock (not where read-only), holds the cap and accounts the device's
    time and energy. A cap that changes needs the `reselector` that picks (b, f)."""
    if changes(spec.cap) != (reselector is not None):
        raise UndercapError("a power schedule needs a reselector (a profile and r(b)), and back")
    options = options or RunOptions()
    prep = _Prepared.build(device, spec, data)
    saved = checkpoint_to_resume(options.checkpoint_dir, options.resume, prep.identity)
    if saved is not None:
        prep.trainer.load_state_dict(saved["trainer"])
    new_cap = cap_change_note(saved, spec.cap.source)
    warnings = list(saved.get("warnings", [])) if saved else list(prep.warnings)
    warnings += [new_cap] if new_cap else []
    device.check_fits(prep.workload, spec.batch_size)
    # on resume, continue at the clock the guard had left, not the requested one; under
    # a new cap, from the requested one again (the guard steps it down if it must)
    freq = saved["freq_mhz"] if saved and not new_cap else spec.freq_mhz
    handle = Capped(
        device,
        dataclasses.replace(spec, freq_mhz=freq),
        prep.workload,
        sample_rate_hz=options.sample_rate_hz,
        reselector=reselector,
        eval_log=EvalLog.open(options.eval_log, options.tensorboard_dir, _resumed_at(saved)),
        saved=saved,
        samples=prep.trainer.samples,
        cuda_sync=prep.cuda_sync,
    )
    try:
        handle.__enter__()
    except PowerWaitError as e:  # a changing cap gave up waiting before the first step
        hint = options.wait_hint if saved else _NOTHING_TRAINED
        raise PowerWaitError(f"{e}. {hint}") from e
    try:
        start = saved["freq_mhz_start"] if saved else handle.session.freq_start
        # what a checkpoint holds beside the loop's and the session's state
        kept = {"freq_mhz_start": start, "warnings": warnings}
        loop_result = _Driver(handle, prep, options, kept).run()
        totals = handle.totals()
    finally:
        handle.__exit__(None, None, None)
    return prep.result(loop_result, handle, totals, start, warnings, saved)


def train_on_device(
    device: Device,
    model_name: str,
    data: Splits,
    *,
    checkpoint_dir: Optional[Union[str, Path]] = None,
    checkpoint_every_s: Optional[float] = defaults.CHECKPOINT_EVERY_S,
    checkpoint_every_samples: Optional[int] = None,
    resume: bool = False,
    sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
    progress: bool = True,
    power_limit_w: Optional[float] = None,
    power_schedule: Optional[Cap] = None,
    reselector: Optional[Reselector] = None,
    eval_log: Optional[Union[str, Path]] = None,
    tensorboard_dir: Optional[Union[str, Path]] = None,
    **spec: Any,
) -> TrainResult:
    """Fine-tune `model_name` on `data` on `device` until the target accuracy (or the
    sample budget), with the clocks locked at `freq_mhz` (None: leave them) and the
    power guard holding `power_limit_w`. `spec` takes the other fields of
    [TrainSpec][undercap.train.spec.TrainSpec] (`batch_size` and `target_accuracy`
    are required). The learning rate is scaled from the largest batch by
    sqrt(b / b_max), as in the r(b) estimate. Evaluation runs with the device's
    accounting paused: it is reported as host time, not as training.

    With a `power_schedule` (a schedule or a live source of the cap) the cap changes
    during training, and the `reselector` picks (b, f) again at every change.
    `eval_log` (a .csv or .jsonl path) and `tensorboard_dir` log every evaluation.
    Checkpoints go to `checkpoint_dir` every `checkpoint_every_s` device seconds (or
    `checkpoint_every_samples`), and `resume=True` continues a killed run exactly.

    The keyword form of [train][undercap.train.runner.train], which takes the two
    values this builds: the TrainSpec and the RunOptions."""
    options = RunOptions(
        checkpoint_dir=checkpoint_dir,
        checkpoint_every_s=checkpoint_every_s,
        checkpoint_every_samples=checkpoint_every_samples,
        resume=resume,
        sample_rate_hz=sample_rate_hz,
        progress=progress,
        eval_log=eval_log,
        tensorboard_dir=tensorboard_dir,
    )
    cap = cap_from(power_limit_w, power_schedule)
    return train(device, TrainSpec(model=model_name, cap=cap, **spec), data, options, reselector)


def _resumed_at(saved: Optional[Dict[str, Any]]) -> Optional[int]:
    """The samples a resumed run's checkpoint holds (None: a fresh run)."""
    return None if saved is None else int(saved["trainer"]["samples"])


class _Driver:
    """undercap's own loop driving its capped handle (module docstring), and the progress bar."""

    def __init__(
        self, handle: Capped, prep: "_Prepared", options: RunOptions, kept: Dict[str, Any]
    ) -> None:
        self.handle, self.prep, self.options, self.kept = handle, prep, options, kept
        self.trainer = trainer = prep.trainer
        self.bar = sample_bar(
            prep.spec.max_samples,
            f"train b={prep.spec.batch_size}",
            options.progress,
            trainer.samples,
        )
        self._eval_t0 = time.perf_counter()  # host clock when the pending evaluation began
        self._switch(handle.batch_size)  # a changing cap chose the first configuration
        trainer.on_step, trainer.on_eval = self.on_step, self.on_eval
        if trainer.plan is not None:
            trainer.plan.on_screen = self.on_screen

    def run(self) -> LoopResult:
        """The loop to its end, checkpointed; a run stopped for power (guard.py, follow.py)
        is checkpointed first, and its message says how to go on."""
        ckpt_dir, trainer = self.options.checkpoint_dir, self.trainer
        try:
            result = trainer.run()
            self.handle.pause()
            if ckpt_dir is not None:
                self.save()
            return result
        except CapExceededError as e:
            if ckpt_dir is None:
                raise
            with self.handle.paused():
                self.save()
            o = self.options
            hint = o.wait_hint if isinstance(e, PowerWaitError) else o.resume_hint
            raise type(e)(
                f"{e}. Checkpointed at {trainer.samples} samples in {ckpt_dir}: {hint}"
            ) from e
        finally:
            self.bar.close()

    def _switch(self, batch_size: int) -> None:
        """Train with `batch_size` from the next step on, with the learning rate
        re-scaled by the same sqrt rule; the optimizer state and the data order stay."""
        if batch_size != self.trainer.cfg.batch_size:
            self.prep.device.check_fits(self.prep.workload, batch_size)
            self.trainer.set_batch_size(batch_size, self.prep.spec.lr_for(batch_size))

    def on_step(self, trainer: Trainer, batch: int) -> None:
        switched = self.handle.step(batch)
        if switched is not None:
            self._switch(switched)
        self.bar.update(batch)
        if trainer.eval_due(trainer.samples - batch):
            self.handle.pause()  # evaluation follows; on_eval resumes
            self._eval_t0 = time.perf_counter()
        elif self._checkpoint_due(trainer):
            with self.handle.paused():  # writing the checkpoint is not training either
                self.save()

    def on_eval(self, trainer: Trainer, point: EvalPoint) -> None:
        self._charge_eval(trainer.eval_items, f"{point.accuracy:.3f}")
        self.handle.report(point.accuracy, loss=point.loss)  # the evaluation log's row
        self._done_evaluating(trainer)

    def on_screen(self, items: int) -> None:
        """A sequential look (loop/evalplan.py) that ruled its grid point out after
        `items` held-out items: charged as evaluation; the pause ends here."""
        self._charge_eval(items, "<target")
        self._done_evaluating(self.trainer)

    def _charge_eval(self, items: int, shown: str) -> None:
        session = self.handle.session
        wall = time.perf_counter() - self._eval_t0
        session.add_eval(items, self.trainer.cfg.eval_batch_size, wall)
        acc = session.acc  # the bar: the last look, evaluation's share of training time
        share = acc.eval_time_s / acc.train_time_s if acc.train_time_s > 0 else 0.0
        self.bar.set_postfix(acc=shown, eval=f"{share:.0%}", refresh=False)

    def _done_evaluating(self, trainer: Trainer) -> None:
        if self._checkpoint_due(trainer):
            self.save()
        self.handle.resume()

    def _checkpoint_due(self, trainer: Trainer) -> bool:
        o, acc = self.options, self.handle.session.acc
        if o.checkpoint_dir is None:
            return False
        by_time = o.checkpoint_every_s is not None and (
            acc.train_time_s - acc.last_ckpt_time_s >= o.checkpoint_every_s
        )
        by_samples = o.checkpoint_every_samples is not None and (
            trainer.samples - acc.last_ckpt_samples >= o.checkpoint_every_samples
        )
        return by_time or by_samples

    def save(self) -> None:
        acc = self.handle.session.acc
        acc.last_ckpt_time_s, acc.last_ckpt_samples = acc.train_time_s, self.trainer.samples
        state = {
            "config": self.prep.identity,
            "trainer": self.trainer.state_dict(),
            **self.handle.session.state(),
            **self.kept,
        }
        save_checkpoint(self.options.checkpoint_dir, state)  # type: ignore[arg-type]


@dataclass
class _Prepared:
    """A training run ready to go: the model in its loop, its workload, and `identity`,
    what a checkpoint of it must match; the model, optimizer and learning rate set up
    exactly as the efficiency estimate does (initial_model, the spec's plan)."""

    spec: TrainSpec
    device: Device
    trainer: Trainer
    workload: Workload
    cuda_sync: Any
    identity: Dict[str, Any]
    device_info: Dict[str, Any]
    init: Dict[str, Any]
    warnings: List[str]

    @classmethod
    def build(cls, device: Device, spec: TrainSpec, data: Splits) -> "_Prepared":
        identity = run_identity(spec, data, device.name)  # validates the spec first
        tdev = resolve_torch_device(spec.torch_device)
        host, warnings = on_device(device, spec.precision, tdev)
        model, init = initial_model(
            spec.model, data, init_seed=spec.seed, pretrained=spec.pretrained
        )
        trainer = Trainer(model, data.to(tdev), spec.loop_config(host), tdev)
        trainer.plan = plan_for(spec)
        if trainer.plan is not None:
            trainer.reorder_eval(look_order(trainer.eval_items, spec.seed))
        if not device.is_simulated and tdev == "cpu":
            warnings.append(
                "training ran on the host CPU (torch sees no CUDA GPU), not on the GPU "
                "whose clocks and power were managed"
            )
        return cls(
            spec,
            device,
            trainer,
            workload_of(model, spec.model, data.input_shape, data.task, spec.precision),
            torch.cuda.synchronize if tdev.startswith("cuda") else None,
            identity,
            device.info().to_dict(),
            init,
            warnings,
        )

    def result(
        self,
        loop: LoopResult,
        handle: Capped,
        totals: Dict[str, Any],
        freq_start: Optional[float],
        warnings: List[str],
        saved: Optional[Dict[str, Any]],
    ) -> TrainResult:
        spec, acc, session = self.spec, handle.session.snapshot(), handle.session
        kept = [w for w in totals["warnings"] if w not in warnings]
        return TrainResult(
            **{k: v for k, v in totals.items() if k not in ("warnings", "freq_mhz_start")},
            reached=loop.reached,
            time_to_accuracy_s=session.schedule_s if loop.reached else None,  # waiting counts too
            samples_to_target=loop.samples_to_target,
            steps=loop.steps,
            batch_size=spec.batch_size,
            samples_trained=loop.samples_trained,
            final_accuracy=loop.final_accuracy,
            target_accuracy=float(self.trainer.cfg.target_accuracy or 0.0),
            energy_source=session.meter.energy_source,
            max_raw_power_w=acc["max_raw_w"],
            eval_wall_s=loop.eval_wall_s,
            train_wall_s=loop.train_wall_s,
            lr=self.trainer.cfg.lr,
            freq_mhz_requested=spec.freq_mhz,
            freq_mhz_start=freq_start,
            guard_window_s=spec.guard_window_s,
            device=self.device_info,
            model=spec.model,  # type: ignore[arg-type]
            dataset=self.identity["dataset"],
            curve=tuple(asdict(p) for p in loop.curve),
            warnings=tuple(warnings + kept),
            resumed_from=_resumed_at(saved),
            schedule=spec.cap.source if changes(spec.cap) else None,
            config={
                **self.identity,
                "init": self.init,
                "torch_device": self.trainer.torch_device,
                "deterministic": self.trainer.cfg.deterministic,
            },
            provenance=provenance(seed=spec.seed, device=self.device.name),
            eval_time_s=acc["eval_time_s"],
            evaluation=self.trainer.evaluation(),
            precision=spec.precision,
            host_precision=self.trainer.cfg.precision,
        )
