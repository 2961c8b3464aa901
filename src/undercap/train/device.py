"""Training to a target accuracy on the device, under a power limit (`undercap train`).

The loop (loop.Trainer) fine-tunes the pre-trained model with the chosen batch size
and the learning rate scaled from the largest batch by sqrt(b / b_max), exactly as
in the efficiency estimate (paper Sec. 4.2); it runs inside a session.Session, which
locks the chosen frequency (restored on every exit path), samples power, holds the
guard and accounts device time and energy per step. Evaluation is not charged to
training: it happens while the session is paused, and is reported separately as
host time.

Checkpoints (checkpoint.py) are written at step boundaries where no evaluation is
pending, or right after an evaluation, so a resumed run repeats exactly the steps
and evaluations the killed one would have made.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from undercap import defaults
from undercap.artifacts.provenance import provenance
from undercap.artifacts.train_result import TrainResult
from undercap.devices.base import Device
from undercap.report.progress import sample_bar
from undercap.train.checkpoint import checkpoint_to_resume
from undercap.train.checkpoint import save_checkpoint as _save
from undercap.train.session import Session, current_freq_mhz
from undercap.train.setup import RunSetup, TrainSpec

if TYPE_CHECKING:
    from undercap.data.base import Splits
    from undercap.train.loop import EvalPoint, Trainer

__all__ = ["TrainResult", "train_on_device"]


class _Hooks:
    """The loop's on_step / on_eval: steps to the session, evaluation paused,
    checkpoints when due, the progress bar."""

    def __init__(self, session: Session, checkpoint: dict[str, Any], bar: Any) -> None:
        self.session, self.ckpt, self.bar = session, checkpoint, bar

    def on_step(self, trainer: Trainer, batch: int) -> None:
        self.session.step(batch)
        self.bar.update(batch)
        if _eval_pending(trainer, batch):
            self.session.pause()  # evaluation follows; on_eval resumes
        elif self._checkpoint_due(trainer):
            with self.session.paused():  # writing the checkpoint is not training either
                self.save(trainer)

    def on_eval(self, trainer: Trainer, point: EvalPoint) -> None:
        self.bar.set_postfix(acc=f"{point.accuracy:.3f}", refresh=False)
        if self._checkpoint_due(trainer):
            self.save(trainer)
        self.session.resume()

    def _checkpoint_due(self, trainer: Trainer) -> bool:
        c, acc = self.ckpt, self.session.acc
        if c["dir"] is None:
            return False
        by_time = c["every_s"] is not None and (
            acc.train_time_s - acc.last_ckpt_time_s >= c["every_s"]
        )
        by_samples = c["every_samples"] is not None and (
            trainer.samples - acc.last_ckpt_samples >= c["every_samples"]
        )
        return by_time or by_samples

    def save(self, trainer: Trainer) -> None:
        acc = self.session.acc
        acc.last_ckpt_time_s, acc.last_ckpt_samples = acc.train_time_s, trainer.samples
        _save(
            self.ckpt["dir"],
            {
                "config": self.ckpt["config"],
                "trainer": trainer.state_dict(),
                "accounts": self.session.snapshot(),
                "freq_mhz": self.session.locked_mhz(),
                "guard_events": [e.to_dict() for e in self.session.guard.events],
                "freq_mhz_start": self.ckpt["freq_mhz_start"],
                "warnings": list(self.ckpt["warnings"]),
            },
        )


def _eval_pending(trainer: Trainer, batch: int) -> bool:
    """Will loop.Trainer.run evaluate right after this step? (same rule as the loop)"""
    every, s = trainer.cfg.eval_every_samples, trainer.samples
    return s // every > (s - batch) // every or s >= trainer.cfg.max_samples


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
    **spec: Any,
) -> TrainResult:
    """Fine-tune `model_name` on `data` on `device` until the target accuracy (or the
    sample budget), with the clocks locked at `freq_mhz` (None: leave them) and the
    power guard holding `power_limit_w`. `spec` takes the fields of
    train.setup.TrainSpec (batch_size and target_accuracy are required). See the
    module docstring."""
    setup = RunSetup.build(device, TrainSpec(model=model_name, **spec), data)
    saved = checkpoint_to_resume(checkpoint_dir, resume, setup.config)
    checkpoint = {
        "dir": checkpoint_dir,
        "every_s": checkpoint_every_s,
        "every_samples": checkpoint_every_samples,
        "config": setup.config,
    }
    return _run(device, setup, saved, checkpoint, sample_rate_hz, progress)


def _run(
    device: Device,
    setup: RunSetup,
    saved: Optional[dict[str, Any]],
    checkpoint: dict[str, Any],
    sample_rate_hz: float,
    progress: bool,
) -> TrainResult:
    spec, trainer = setup.spec, setup.trainer
    if saved is not None:
        trainer.load_state_dict(saved["trainer"])
    warnings = list(saved.get("warnings", [])) if saved else list(setup.warnings)
    device.check_fits(setup.workload, spec.batch_size)
    session = Session(
        device,
        power_limit_w=spec.power_limit_w,
        # on resume, continue at the frequency the guard had left, not the requested one
        freq_mhz=saved["freq_mhz"] if saved else spec.freq_mhz,
        workload=setup.workload,
        guard_window_s=spec.guard_window_s,
        sample_rate_hz=sample_rate_hz,
        cuda_sync=setup.cuda_sync,
        saved=saved,
        samples=trainer.samples,
    )
    bar = sample_bar(spec.max_samples, f"train b={spec.batch_size}", progress, trainer.samples)
    with session:
        freq_start = saved["freq_mhz_start"] if saved else session.freq_start
        ckpt = dict(checkpoint, freq_mhz_start=freq_start, warnings=warnings)
        hooks = _Hooks(session, ckpt, bar)
        trainer.on_step, trainer.on_eval = hooks.on_step, hooks.on_eval
        try:
            loop_result = trainer.run()
            session.pause()
            if checkpoint["dir"] is not None:
                hooks.save(trainer)
        finally:
            bar.close()
        acc = session.snapshot()
        freq_final = current_freq_mhz(device)
    return setup.result(
        loop_result,
        acc,
        guard=session.guard,
        freq_start=freq_start,
        freq_final=freq_final,
        energy_source=session.energy_source,
        warnings=warnings,
        resumed_from=int(saved["trainer"]["samples"]) if saved else None,
        provenance=provenance(seed=spec.seed, device=device.name),
    )
