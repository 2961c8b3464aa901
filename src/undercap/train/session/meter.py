"""The time and energy of training on a device, apart from what is not training
(evaluation, checkpoints, waiting for power); a session keeps one from the moment its
power sampler starts.

Per step the meter charges the device the step (`account_step`: a simulated device
advances its virtual clock) and synchronises, so device-clock deltas bracket exactly
the training work. Energy: the device counter's delta where there is one; on a
simulated device the sampler's integral over its whole window (its clock only advances
in steps); else the sampler's mean power times each span's length. No torch import.
"""

import math
from typing import Any, Callable, Dict, Optional

from undercap.artifacts.workload import Workload
from undercap.devices.base import Device


class Accounts:
    """Device-side totals of the training spans; they survive a resume (checkpoint)."""

    def __init__(self, saved: Optional[Dict[str, Any]] = None) -> None:
        s = saved or {}
        self.train_time_s = float(s.get("train_time_s", 0.0))
        self.energy_j = float(s.get("energy_j", 0.0))
        self.peak_w = float(s.get("peak_w", 0.0))
        self.max_raw_w = float(s.get("max_raw_w", 0.0))
        self.exceeded_windows = int(s.get("exceeded_windows", 0))
        self.pause_time_s = float(s.get("pause_time_s", 0.0))  # waiting for power
        self.eval_time_s = float(s.get("eval_time_s", 0.0))  # device time evaluating
        self.last_ckpt_time_s = float(s.get("last_ckpt_time_s", self.train_time_s))
        self.last_ckpt_samples = int(s.get("last_ckpt_samples", 0))

    def to_dict(self) -> Dict[str, Any]:
        return dict(vars(self))


class Meter:
    """Charges training spans to `acc` (module docstring), from the device's clock and
    energy counter or the power `sampler` (devices/sampler.py)."""

    def __init__(
        self,
        device: Device,
        sampler: Any,
        acc: Accounts,
        cuda_sync: Optional[Callable[[], None]] = None,
    ) -> None:
        self.device, self.sampler, self.acc, self.cuda_sync = device, sampler, acc, cuda_sync
        self.use_counter = device.energy_j() is not None
        self.whole_window = not self.use_counter and device.is_simulated
        self.last_step_s = 0.0  # device time of the latest step
        self._peak_w = self._max_raw_w = 0.0  # this process's, over the sampler's window
        self.begin_span()

    def _sync(self) -> None:
        if self.cuda_sync is not None:
            self.cuda_sync()
        self.device.synchronize()

    def begin_span(self) -> None:
        """Charge from now on."""
        self._sync()
        self._t_last = self.device.now_s()
        self._e_last = self.device.energy_j() if self.use_counter else None
        self._span_s = 0.0

    def close_span(self) -> None:
        """Stop charging: the energy of the span that just ended (sampler-based devices)."""
        if not self.use_counter and not self.whole_window and self._span_s > 0:
            mean_w = self.sampler.window_mean_w(self._span_s)
            if mean_w is not None and math.isfinite(mean_w):
                self.acc.energy_j += mean_w * self._span_s
        self._span_s = 0.0

    def step(self, workload: Optional[Workload], samples: int) -> None:
        """One optimizer step that trained on `samples` samples."""
        if workload is not None:
            self.device.account_step(workload, samples)
        self._sync()
        t = self.device.now_s()
        dt = max(t - self._t_last, 0.0)
        self._t_last, self.last_step_s = t, dt
        self._span_s += dt
        self.acc.train_time_s += dt
        if self.use_counter:
            e = self.device.energy_j()
            if e is not None and self._e_last is not None:
                self.acc.energy_j += max(e - self._e_last, 0.0)
            self._e_last = e

    def add_eval(
        self, workload: Optional[Workload], n_items: int, batch_size: int, wall_s: float
    ) -> float:
        """Count an evaluation of `n_items` (batches of `batch_size`) that took `wall_s`
        on the host; returns its device time: a simulated device's model of the forward
        pass (devices/simulated/model.eval_pass_s), else the wall time."""
        model = getattr(self.device, "eval_time_s", None) if workload else None
        spent = wall_s if model is None else float(model(workload, n_items, batch_size))
        self.acc.eval_time_s += spent
        return spent

    def waited(self, seconds: float, t0_s: float, e0_j: Optional[float]) -> None:
        """`seconds` of schedule time waited for power from device time `t0_s` (counter
        reading `e0_j`): paused time, and its energy (the idle device draws too)."""
        self.acc.pause_time_s += max(seconds, 0.0)
        if e0_j is not None:
            e1 = self.device.energy_j()
            self.acc.energy_j += 0.0 if e1 is None else max(e1 - e0_j, 0.0)
        elif not self.whole_window:
            mean_w = self.sampler.window_mean_w(self.device.now_s() - t0_s)
            self.acc.energy_j += mean_w * seconds if math.isfinite(mean_w) else 0.0

    def energy_so_far_j(self) -> float:
        """Energy of the run so far (the whole-window integral on simulated devices)."""
        extra = self.sampler.stats().energy_j if self.whole_window else 0.0
        return self.acc.energy_j + extra

    def snapshot(self, exceeded_windows: int) -> Dict[str, Any]:
        """The accounts with this process's power peaks (and whole-window energy), and
        the guard's windows over the limit in this process (`exceeded_windows`)."""
        stats = self.sampler.stats()
        self._peak_w = max(self._peak_w, float(stats.peak_w))
        self._max_raw_w = max(self._max_raw_w, float(stats.max_raw_w))
        acc = self.acc.to_dict()
        if self.whole_window:
            acc["energy_j"] += float(stats.energy_j)
        acc["peak_w"] = max(acc["peak_w"], self._peak_w)
        acc["max_raw_w"] = max(acc["max_raw_w"], self._max_raw_w)
        acc["exceeded_windows"] = self.acc.exceeded_windows + exceeded_windows
        return acc

    @property
    def energy_source(self) -> str:
        return "counter" if self.use_counter else "sampler"
