"""Training to a target accuracy on the device, under a power limit (`undercap train`).

The chosen frequency is locked for the whole run inside `devices.base.controlled`, so
the original clocks come back on every exit path (normal end, error, Ctrl-C,
SIGTERM). The pre-trained model is fine-tuned with the chosen batch size and the
learning rate scaled from the largest batch by sqrt(b / b_max), exactly as in the
efficiency estimate (paper Sec. 4.2), through the shared loop (loop.Trainer).

Accounting (per training step, through the loop's on_step hook):
* the device is charged the step (`account_step`: a simulated device advances its
  virtual clock by t(b, f) * b; real devices already did the work), then
  synchronised, so device-clock deltas bracket exactly the training work;
* training time is the sum of those deltas; evaluation is excluded (the span
  restarts after each evaluation) and reported separately as host time;
* energy is the device energy counter's delta over the same spans where the device
  has one; on a simulated device the integral of the sampler's readings over its
  whole window (the virtual clock only advances in training steps); otherwise the
  sampler's mean power over each span times its length;
* the power guard (guard.py) checks the sampler after every step.

Checkpoints (checkpoint.py) are written at step boundaries where no evaluation is
pending, or right after an evaluation, so a resumed run repeats exactly the steps
and evaluations the killed one would have made.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from undercap import defaults
from undercap.artifacts.provenance import provenance
from undercap.artifacts.train_result import TrainResult
from undercap.devices.base import Device, controlled
from undercap.errors import DevicePermissionError
from undercap.report.progress import sample_bar
from undercap.train.checkpoint import checkpoint_to_resume
from undercap.train.checkpoint import save_checkpoint as _save
from undercap.train.guard import STEP_DOWN, GuardEvent, PowerGuard, can_control_clocks
from undercap.train.setup import RunSetup, TrainSpec

if TYPE_CHECKING:
    from undercap.artifacts.workload import Workload
    from undercap.data.base import Splits
    from undercap.devices.sampler import PowerSampler
    from undercap.train.loop import EvalPoint, Trainer

__all__ = ["TrainResult", "train_on_device"]


class _Accounts:
    """Device-side accounting of the training spans; survives resume via checkpoint."""

    def __init__(self, saved: Optional[dict[str, Any]]) -> None:
        s = saved or {}
        self.train_time_s = float(s.get("train_time_s", 0.0))
        self.energy_j = float(s.get("energy_j", 0.0))
        self.peak_w = float(s.get("peak_w", 0.0))
        self.max_raw_w = float(s.get("max_raw_w", 0.0))
        self.exceeded_windows = int(s.get("exceeded_windows", 0))
        self.last_ckpt_time_s = float(s.get("last_ckpt_time_s", self.train_time_s))
        self.last_ckpt_samples = int(s.get("last_ckpt_samples", 0))

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class _Session:
    """The on_step / on_eval hooks of one process's part of a training run."""

    def __init__(
        self,
        device: Device,
        sampler: PowerSampler,
        guard: PowerGuard,
        workload: Workload,
        accounts: _Accounts,
        *,
        checkpoint: dict[str, Any],
        cuda_sync: Any,
        bar: Any,
    ) -> None:
        self.device, self.sampler, self.guard, self.workload = device, sampler, guard, workload
        self.acc = accounts
        self.ckpt = checkpoint  # dir, every_s, every_samples, extra state
        self.cuda_sync = cuda_sync
        self.bar = bar
        # Energy of training only: the device counter over training spans where there
        # is one; on a simulated device the virtual clock advances only in training
        # steps, so the sampler's whole window is training; otherwise the sampler's
        # mean over each span times its length.
        self.use_counter = device.energy_j() is not None
        self.whole_window = not self.use_counter and device.is_simulated
        self.seg_peak_w, self.seg_max_raw_w = 0.0, 0.0
        self.begin_span()

    # --- spans of training work -----------------------------------------------------
    def _sync(self) -> None:
        if self.cuda_sync is not None:
            self.cuda_sync()
        self.device.synchronize()

    def begin_span(self) -> None:
        self._sync()
        self._t_last = self.device.now_s()
        self._e_last = self.device.energy_j() if self.use_counter else None
        self._span_s = 0.0

    def close_span(self) -> None:
        """Charge the energy of the span that just ended (sampler-based devices)."""
        if not self.use_counter and not self.whole_window and self._span_s > 0:
            mean_w = self.sampler.window_mean_w(self._span_s)
            if mean_w is not None and math.isfinite(mean_w):
                self.acc.energy_j += mean_w * self._span_s
        self._span_s = 0.0

    # --- hooks ----------------------------------------------------------------------
    def on_step(self, trainer: Trainer, batch: int) -> None:
        self.device.account_step(self.workload, batch)
        self._sync()
        t = self.device.now_s()
        dt = max(t - self._t_last, 0.0)
        self._t_last = t
        self._span_s += dt
        self.acc.train_time_s += dt
        if self.use_counter:
            e = self.device.energy_j()
            if e is not None and self._e_last is not None:
                self.acc.energy_j += max(e - self._e_last, 0.0)
            self._e_last = e
        self.guard.check(t, self.acc.train_time_s, trainer.samples)
        if self.bar is not None:
            self.bar.update(batch)
        if _eval_pending(trainer, batch):
            self.close_span()  # evaluation follows; on_eval opens the next span
        elif self._checkpoint_due(trainer):
            self.close_span()
            self.save(trainer)
            self.begin_span()  # writing the checkpoint is not training either

    def on_eval(self, trainer: Trainer, point: EvalPoint) -> None:
        if self.bar is not None:
            self.bar.set_postfix(acc=f"{point.accuracy:.3f}", refresh=False)
        if self._checkpoint_due(trainer):
            self.save(trainer)
        self.begin_span()

    # --- checkpoints ----------------------------------------------------------------
    def _checkpoint_due(self, trainer: Trainer) -> bool:
        c = self.ckpt
        if c["dir"] is None:
            return False
        by_time = c["every_s"] is not None and (
            self.acc.train_time_s - self.acc.last_ckpt_time_s >= c["every_s"]
        )
        by_samples = c["every_samples"] is not None and (
            trainer.samples - self.acc.last_ckpt_samples >= c["every_samples"]
        )
        return by_time or by_samples

    def snapshot(self) -> dict[str, Any]:
        """Accounts with this segment's power peaks (and whole-window energy) folded in."""
        stats = self.sampler.stats()
        self.seg_peak_w = max(self.seg_peak_w, float(stats.peak_w))
        self.seg_max_raw_w = max(self.seg_max_raw_w, float(stats.max_raw_w))
        acc = self.acc.to_dict()
        if self.whole_window:
            acc["energy_j"] += float(stats.energy_j)
        acc["peak_w"] = max(acc["peak_w"], self.seg_peak_w)
        acc["max_raw_w"] = max(acc["max_raw_w"], self.seg_max_raw_w)
        acc["exceeded_windows"] = self.acc.exceeded_windows + self.guard.exceeded_windows
        return acc

    def locked_mhz(self) -> Optional[float]:
        """The clock the run holds now: the guard's last step-down, else the one
        locked at the start (not a read-back, which a thermal cap may lower)."""
        downs = [e.to_mhz for e in self.guard.events if e.action == STEP_DOWN]
        return downs[-1] if downs else self.ckpt["freq_mhz_locked"]

    def save(self, trainer: Trainer) -> None:
        self.acc.last_ckpt_time_s = self.acc.train_time_s
        self.acc.last_ckpt_samples = trainer.samples
        _save(
            self.ckpt["dir"],
            {
                "config": self.ckpt["config"],
                "trainer": trainer.state_dict(),
                "accounts": self.snapshot(),
                "freq_mhz": self.locked_mhz(),
                "guard_events": [e.to_dict() for e in self.guard.events],
                "freq_mhz_start": self.ckpt["freq_mhz_start"],
                "warnings": list(self.ckpt["warnings"]),
            },
        )


def _eval_pending(trainer: Trainer, batch: int) -> bool:
    """Will loop.Trainer.run evaluate right after this step? (same rule as the loop)"""
    every, s = trainer.cfg.eval_every_samples, trainer.samples
    return s // every > (s - batch) // every or s >= trainer.cfg.max_samples


def _current_freq(device: Device) -> Optional[float]:
    try:
        return float(device.current_freq_mhz())
    except Exception:
        return None


@contextlib.contextmanager
def _clock_control(device: Device) -> Iterator[bool]:
    """controlled() when we may change clocks; otherwise leave the device alone."""
    if can_control_clocks(device):
        with controlled(device):
            yield True
    else:
        yield False


def _lock(device: Device, freq_mhz: Optional[float], control: bool) -> Optional[float]:
    if freq_mhz is None:
        return _current_freq(device)
    if not control:
        raise DevicePermissionError(
            f"{device.name} is read-only here: cannot lock {freq_mhz:g} MHz; "
            "drop --freq-mhz to train at the current clocks, or allow clock control"
        )
    return float(device.set_freq_mhz(freq_mhz))


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
    return _run(
        device,
        setup,
        saved,
        checkpoint={
            "dir": checkpoint_dir,
            "every_s": checkpoint_every_s,
            "every_samples": checkpoint_every_samples,
            "config": setup.config,
        },
        sample_rate_hz=sample_rate_hz,
        progress=progress,
    )


def _run(
    device: Device,
    setup: RunSetup,
    saved: Optional[dict[str, Any]],
    *,
    checkpoint: dict[str, Any],
    sample_rate_hz: float,
    progress: bool,
) -> TrainResult:
    from undercap.devices.sampler import PowerSampler

    spec, trainer = setup.spec, setup.trainer
    if saved is not None:
        trainer.load_state_dict(saved["trainer"])
    warnings = list(saved.get("warnings", [])) if saved else list(setup.warnings)
    device.check_fits(setup.workload, spec.batch_size)
    with _clock_control(device) as control:
        # On resume, continue at the frequency the guard had left, not the requested one.
        want = saved["freq_mhz"] if saved else spec.freq_mhz
        locked = _lock(device, want, control)
        freq_start = saved["freq_mhz_start"] if saved else locked
        bar = sample_bar(spec.max_samples, f"train b={spec.batch_size}", progress, trainer.samples)
        with PowerSampler(device, rate_hz=sample_rate_hz) as sampler:
            ckpt = {**checkpoint, "freq_mhz_start": freq_start, "freq_mhz_locked": want}
            session = _session(device, sampler, setup, saved, dict(ckpt, warnings=warnings), bar)
            trainer.on_step, trainer.on_eval = session.on_step, session.on_eval
            try:
                loop_result = trainer.run()
                session.close_span()
                if checkpoint["dir"] is not None:
                    session.save(trainer)
            finally:
                bar.close()
            acc = session.snapshot()
            freq_final = _current_freq(device)
    return setup.result(
        loop_result,
        acc,
        guard=session.guard,
        freq_start=freq_start,
        freq_final=freq_final,
        energy_source="counter" if session.use_counter else "sampler",
        warnings=warnings,
        resumed_from=int(saved["trainer"]["samples"]) if saved else None,
        provenance=provenance(seed=spec.seed, device=device.name),
    )


def _session(
    device: Device,
    sampler: PowerSampler,
    setup: RunSetup,
    saved: Optional[dict[str, Any]],
    checkpoint: dict[str, Any],
    bar: Any,
) -> _Session:
    """The hooks of this process's part of the run, continuing a checkpoint's accounts
    and guard events when resuming."""
    events = [GuardEvent.from_dict(e) for e in saved["guard_events"]] if saved else []
    guard = PowerGuard(
        device,
        sampler,
        setup.spec.power_limit_w,
        window_s=setup.spec.guard_window_s,
        start_s=device.now_s(),
        events=events,
    )
    accounts = _Accounts(saved["accounts"] if saved else None)
    return _Session(
        device,
        sampler,
        guard,
        setup.workload,
        accounts,
        checkpoint=checkpoint,
        cuda_sync=setup.cuda_sync,
        bar=bar,
    )
