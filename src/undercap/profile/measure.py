"""Measuring one configuration (b, f): as long as it takes, and no longer.

The stop rule is ProfileSettings'. The power window is devices.base.power_window_s (the
robust peak's window, widened to hold several sensor updates: a shorter measurement
would not see a window's worth of fresh readings); the peak's repeated windows are
pieces of max(window, one step) (margin.repeated_peaks). Each row records its margin
and what sized it (margin.py).

Warm-up (first-iteration allocation, cuDNN autotuning) belongs to a batch size, not to
a clock (the GPU runs at a new clock within milliseconds of the devfreq/NVML write), so
the sweep's consecutive probes of one batch size share one warm-up.

On a simulated device the virtual clock and modelled power give t and P; the host runs
one real step per batch size (the model must build, fit and train) and the device
accounts every step. On real hardware every step runs the real model.
"""

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from undercap import defaults
from undercap.artifacts.profile import ProfileRow
from undercap.devices.base import Device, power_window_s
from undercap.devices.sampler import PowerSampler, summarize
from undercap.errors import DeviceOutOfMemoryError
from undercap.profile.margin import MarginPolicy, ci_halfwidth, reading_noise_w, repeated_peaks
from undercap.profile.stepper import Stepper


@dataclass(frozen=True)
class ProfileSettings:
    """How each configuration (b, f) is measured: with the clock locked, mini-batches
    of the real model run while power is sampled, until time per sample and peak power
    are known well enough, and no longer.

    Args:
        warmup_steps: Warm-up mini-batches per batch size (allocation, cuDNN
            autotuning); a clock change needs none.
        measure_steps: Fewest measured mini-batches per configuration (two give a
            confidence interval).
        sample_rate_hz: Power readings per second.
        seed: Torch seed set before the model is built (its initial weights).
        host_steps: Simulated devices only: run one real step per batch size on the
            host to prove the model builds, fits and trains. False skips host compute
            (the device model still gives every t and P), to profile many models cheaply.
        max_steps: Most measured mini-batches per configuration, whatever the
            confidence intervals say.
        min_windows: Measure each configuration for at least this many power windows
            (the robust peak's window, widened for slow sensors).
        time_rel_tol: Stop once the 95% confidence interval of time per sample is
            within this fraction of it ...
        peak_rel_tol: ... and that of the peak power, over repeated windows, within
            this fraction of it.
    """

    warmup_steps: int = defaults.PROFILE_WARMUP_STEPS
    measure_steps: int = defaults.PROFILE_MEASURE_STEPS
    sample_rate_hz: float = defaults.PROFILE_SAMPLE_RATE_HZ
    seed: int = 0
    host_steps: bool = True
    max_steps: int = defaults.PROFILE_MAX_STEPS
    min_windows: float = defaults.PROFILE_MIN_WINDOWS
    time_rel_tol: float = defaults.PROFILE_TIME_REL_TOL
    peak_rel_tol: float = defaults.PROFILE_PEAK_REL_TOL


class Measurer:
    """Measures configurations on one device, shares warm-ups, counts the cost. Rows
    already known (`prior`, e.g. from a feasibility probe) are returned unmeasured."""

    def __init__(
        self,
        device: Device,
        stepper: Stepper,
        settings: ProfileSettings,
        tick: Callable[[], None],
        prior: Optional[Dict[Tuple[int, float], ProfileRow]] = None,
    ) -> None:
        self.device, self.stepper, self.settings, self.tick = device, stepper, settings, tick
        self.can_control = not device.read_only and device.info().control_permitted
        self.rows: Dict[Tuple[int, float], ProfileRow] = {
            self._key(b, None if not self.can_control else f): row
            for (b, f), row in (prior or {}).items()
        }
        self.reused = set(self.rows)
        self.unfit: List[int] = []
        self.warmup_steps = self.measured_steps = 0
        self.snaps: List[Dict[str, float]] = []  # configurations whose clock read back differently
        self.host_steps = settings.host_steps or not device.is_simulated
        self.window_s = power_window_s(device)
        self.policy = MarginPolicy(self.window_s, device.sensor_update_interval_s())
        self._warm_b: Optional[int] = None

    @property
    def min_duration_s(self) -> float:
        return self.settings.min_windows * self.window_s

    def _step(self, b: int) -> None:
        # Simulated devices: the host already ran one real step per batch size in
        # fits(); host speed does not enter the virtual clock, which charges here.
        if not self.device.is_simulated:
            self.stepper.step()
        self.device.account_step(self.stepper.workload, b)

    def _sync(self) -> None:
        self.stepper.synchronize()
        self.device.synchronize()

    def fits(self, b: int) -> bool:
        try:
            self.device.check_fits(self.stepper.workload, b)
            if self.host_steps:  # a real step proves it builds and fits on the host
                self.stepper.set_batch_size(b)
                self.stepper.step()
                self.stepper.synchronize()
        except DeviceOutOfMemoryError:
            return False
        except RuntimeError as e:
            if self.stepper.is_oom(e):
                return False
            raise
        return True

    @staticmethod
    def _key(b: int, freq_mhz: Optional[float]) -> Tuple[int, float]:
        """Rows are keyed by the requested step; read-only (None): one row per batch
        size, whatever clock it ran at (a prior row measured read-only is that row)."""
        return (b, -1.0 if freq_mhz is None else float(freq_mhz))

    def measure(self, b: int, freq_mhz: Optional[float]) -> ProfileRow:
        """One configuration (module docstring); None: the clock the device runs."""
        key = self._key(b, freq_mhz)
        if key in self.rows:
            return self.rows[key]
        step_mhz = self._lock(b, freq_mhz)
        if self._warm_b != b:  # a new batch size: warm up (a new clock needs none)
            if not self.device.is_simulated:
                self.stepper.set_batch_size(b)
            for _ in range(self.settings.warmup_steps):
                self._step(b)
            self.warmup_steps += self.settings.warmup_steps
            self._warm_b = b
        self._sync()
        with PowerSampler(
            self.device, rate_hz=self.settings.sample_rate_hz, peak_window_s=self.window_s
        ) as sampler:
            start = self.device.now_s()
            step_times: List[float] = []
            seen_mhz: List[float] = []  # read-only: the clock while the step runs
            while True:
                t0 = self.device.now_s()
                self._step(b)
                if freq_mhz is None:
                    seen_mhz.append(float(self.device.current_freq_mhz()))
                self._sync()
                step_times.append(self.device.now_s() - t0)
                if self._enough(step_times, sampler, start):
                    break
        self.measured_steps += len(step_times)
        if seen_mhz:  # the clock under load, not the idle one read before the warm-up
            step_mhz = float(np.median(seen_mhz))
        row = self._row(b, step_mhz, np.asarray(step_times), sampler)
        self.rows[key] = row
        self.tick()
        return row

    def _lock(self, b: int, freq_mhz: Optional[float]) -> float:
        if freq_mhz is None:  # read-only: measure at whatever clock the device runs
            return float(self.device.current_freq_mhz())
        # Rows are keyed by the requested step: a throttled board can read back
        # the same clock for two steps, which would make duplicate rows.
        read_back = self.device.set_freq_mhz(freq_mhz)
        if abs(read_back - freq_mhz) > 1e-6:
            self.snaps.append({"batch_size": b, "freq_mhz": freq_mhz, "read_back_mhz": read_back})
        return float(freq_mhz)

    def _enough(self, step_times: List[float], sampler: PowerSampler, start_s: float) -> bool:
        s, n = self.settings, len(step_times)
        if n >= s.max_steps:
            return True
        duration = self.device.now_s() - start_s
        if n < s.measure_steps or duration < self.min_duration_s:
            return False
        if n >= 2:  # one step alone (measure_steps=1) has no interval: accepted as asked
            times = np.asarray(step_times)
            if ci_halfwidth(times) > s.time_rel_tol * float(times.mean()):
                return False
        peaks = self._peaks(sampler, float(np.mean(step_times)))
        if peaks.size < 2:
            return n == 1 and s.measure_steps <= 1
        return ci_halfwidth(peaks) <= s.peak_rel_tol * float(peaks.mean())

    def _readings(self, sampler: PowerSampler) -> Tuple[np.ndarray, np.ndarray]:
        """The measurement's readings from one sensor update after its start: a reading
        taken as the clock changes still averages over the previous configuration (its
        last step's power), which would bias the row by the direction the sweep moved."""
        arr = np.asarray(sampler.samples(), dtype=np.float64).reshape(-1, 2)
        if arr.shape[0] > 3:
            keep = arr[:, 0] > arr[0, 0] + self.policy.sensor_update_s + 1e-12
            arr = arr[keep] if int(keep.sum()) >= 3 else arr
        return arr[:, 0], arr[:, 1]

    def _peaks(self, sampler: PowerSampler, step_s: float) -> np.ndarray:
        t, p = self._readings(sampler)
        start = sampler.samples()[0][0]  # pieces from the measurement's start
        # whole steps per piece, at least a window: every piece sees every phase of the
        # step, so their peaks differ by noise and load, not by where the ripple fell
        piece = step_s * max(1, math.ceil(self.window_s / step_s - 1e-9)) if step_s > 0 else 0.0
        return repeated_peaks(t, p, max(piece, self.window_s), self.window_s, start)

    def _row(
        self, b: int, freq_mhz: float, step_times: np.ndarray, sampler: PowerSampler
    ) -> ProfileRow:
        t, p = self._readings(sampler)
        stats = summarize(t, p, self.window_s)
        noise = reading_noise_w(t, p, float(step_times.mean()))
        peaks = self._peaks(sampler, float(step_times.mean()))
        spread = float(np.std(peaks, ddof=1)) if peaks.size >= 2 else 0.0
        return ProfileRow(
            batch_size=b,
            freq_mhz=float(freq_mhz),
            time_per_sample_s=float(step_times.sum()) / (step_times.size * b),
            peak_power_w=stats.peak_w,
            mean_power_w=stats.mean_w,
            peak_margin_w=self.policy.margin_w(noise, spread),
            noise_w=noise,
            peak_spread_w=spread,
            steps=int(step_times.size),
            duration_s=float(step_times.sum()),
        )
