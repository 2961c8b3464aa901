"""Power sampling over a window: robust peak, mean, energy. No torch.

    with PowerSampler(device, rate_hz=100.0) as s:
        ...                      # run the work
    stats = s.stats()            # PowerStats(peak_w, max_raw_w, mean_w, energy_j, ...)

Real devices: a daemon thread polls `device.power_w()` every 1/rate_hz seconds of wall
time; energy is the device's energy counter's difference where it has one (NVML), else
the trapezoid integral of the readings. Simulated devices record every span their
virtual clock advanced, so the sampler reads them at virtual times start + k/rate_hz
(plus one at the window's end) when asked, via `device.power_readings_w`: exact,
deterministic, and independent of how fast the host ran.

Peak power: the largest raw reading is a poor peak (sensor noise, sub-second ripple of
forward/backward phases and kernel bursts), while INA3221 monitors already average each
reading over their conversion window and a supply's or power budget's limit reacts to
power averaged over tens to hundreds of milliseconds. So `peak_w` is the maximum of the
time-weighted moving average over `peak_window_s` (default 0.2 s), `max_raw_w` the raw
maximum; a measurement shorter than the window gives its time-weighted mean.
"""

import bisect
import math
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import List, Optional, Set, Tuple, Union

import numpy as np

from undercap import defaults
from undercap.devices.base import Device
from undercap.errors import DeviceError

PEAK_WINDOW_S = defaults.PEAK_WINDOW_S


@dataclass(frozen=True)
class PowerStats:
    """Power over one sampling window. Powers in W, energy in J, time in s."""

    peak_w: float  # max of the moving average over peak_window_s (robust peak)
    max_raw_w: float  # largest single reading
    mean_w: float  # time-weighted mean
    energy_j: float
    duration_s: float
    n_samples: int
    peak_window_s: float = PEAK_WINDOW_S
    energy_from_counter: bool = False


def summarize(
    times_s: np.ndarray, power_w: np.ndarray, peak_window_s: float = PEAK_WINDOW_S
) -> PowerStats:
    """Statistics of readings `power_w` taken at ascending `times_s`."""
    t = np.asarray(times_s, dtype=np.float64)
    p = np.asarray(power_w, dtype=np.float64)
    if t.size == 0:
        raise DeviceError("no power readings were taken; sample over a longer window")
    duration = float(t[-1] - t[0])
    steps = np.diff(t) * (p[1:] + p[:-1]) / 2.0  # trapezoids
    cum = np.concatenate([[0.0], np.cumsum(steps)])  # energy from t[0] up to each t[i]
    energy = float(cum[-1])
    mean = energy / duration if duration > 0 else float(p.mean())
    return PowerStats(
        peak_w=_robust_peak(t, p, cum, peak_window_s, mean),
        max_raw_w=float(p.max()),
        mean_w=mean,
        energy_j=energy,
        duration_s=duration,
        n_samples=int(t.size),
        peak_window_s=peak_window_s,
    )


def _robust_peak(
    t: np.ndarray, p: np.ndarray, cum: np.ndarray, window_s: float, mean: float
) -> float:
    """Max over sample times t_i >= t_0 + w of (E(t_i) - E(t_i - w)) / w, with E the
    integral of the piecewise-linear interpolation of the readings."""
    if window_s <= 0:
        return float(p.max())
    ends = t[t - t[0] >= window_s - 1e-12]
    if ends.size == 0:
        return mean
    starts = ends - window_s
    j = np.clip(np.searchsorted(t, starts, side="right") - 1, 0, t.size - 1)
    p_start = np.interp(starts, t, p)
    e_start = cum[j] + (starts - t[j]) * (p[j] + p_start) / 2.0
    e_end = np.interp(ends, t, cum)
    # never above the raw maximum (an average cannot be; guards float round-off)
    return float(min(np.max((e_end - e_start) / window_s), p.max()))


_WARNED_SET_ASIDE: Set[str] = set()


def plausible_w(power_w: float) -> bool:
    """Whether a sensor can give this reading: finite, not negative, not beyond any GPU."""
    return math.isfinite(power_w) and 0.0 <= power_w <= defaults.MAX_PLAUSIBLE_POWER_W


class PowerSampler:
    """Samples a device's power while the `with` block runs (see module docstring)."""

    def __init__(
        self,
        device: Device,
        rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
        *,
        peak_window_s: float = PEAK_WINDOW_S,
    ) -> None:
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"rate_hz must be a positive number, got {rate_hz}")
        if not (math.isfinite(peak_window_s) and peak_window_s >= 0):
            raise ValueError(f"peak_window_s must be >= 0, got {peak_window_s}")
        self.device = device
        self.rate_hz = float(rate_hz)
        self.peak_window_s = float(peak_window_s)
        simulated = bool(getattr(device, "is_simulated", False))
        self._virtual = simulated and hasattr(device, "power_readings_w")
        self._impl: Optional[Union[_VirtualSampling, _ThreadSampling]] = None

    def __enter__(self) -> "PowerSampler":
        if self._impl is not None:
            raise RuntimeError("a PowerSampler can only be used once")
        cls = _VirtualSampling if self._virtual else _ThreadSampling
        self._impl = cls(self.device, 1.0 / self.rate_hz)
        self._impl.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._started().stop()

    def _started(self) -> "Union[_VirtualSampling, _ThreadSampling]":
        if self._impl is None:
            raise RuntimeError("PowerSampler used before entering its `with` block")
        return self._impl

    def samples(self) -> List[Tuple[float, float]]:
        """All readings so far as (t_s, power_w), in device time."""
        t, p = self._started().readings()
        return list(zip(t.tolist(), p.tolist()))

    def stats(self) -> PowerStats:
        """Statistics over the window so far (or the whole window once exited)."""
        impl = self._started()
        t, p = impl.readings()
        stats = summarize(t, p, self.peak_window_s)
        counted = impl.counter_energy_j()
        if counted is None:
            return stats
        mean = counted / stats.duration_s if stats.duration_s > 0 else stats.mean_w
        return replace(stats, mean_w=mean, energy_j=counted, energy_from_counter=True)

    def stats_between(self, start_s: float, end_s: float) -> Optional[PowerStats]:
        """Statistics of the readings from `start_s` to `end_s` (device time), e.g. one
        segment of a run whose cap changed; None when no reading falls inside."""
        t, p = self._started().readings()
        inside = (t >= start_s - 1e-12) & (t <= end_s + 1e-12)
        return summarize(t[inside], p[inside], self.peak_window_s) if inside.any() else None

    def recent_readings(self, window_s: float) -> Tuple[np.ndarray, np.ndarray]:
        """The readings of the most recent `window_s` (device time) as arrays, without
        the rest of the window: the power guard judges every window since its last
        check (train/session/guard.py) at a cost that does not grow with the run."""
        return self._started().recent(window_s)

    def window_mean_w(self, window_s: float) -> float:
        """Mean of the readings in the most recent `window_s` (for a power guard);
        the latest reading when none falls inside the window (NaN: one no sensor gives)."""
        t, p = self._started().recent(window_s)
        if t.size == 0:
            now = float(self.device.power_w())
            return now if plausible_w(now) else math.nan
        return float(p.mean())


class _VirtualSampling:
    """Readings at virtual times t0 + k*dt, computed when asked (module docstring): a
    simulated reading depends only on the device's recorded past and (seed, time)."""

    def __init__(self, device: Device, dt_s: float) -> None:
        self.device, self.dt = device, dt_s
        self.t0 = 0.0
        self.t_end: Optional[float] = None

    def start(self) -> None:
        self.t0 = self.device.now_s()

    def stop(self) -> None:
        self.t_end = self.device.now_s()

    def counter_energy_j(self) -> Optional[float]:
        return None  # simulated Jetsons have no energy counter, like the real boards

    def _end(self) -> float:
        return self.device.now_s() if self.t_end is None else self.t_end

    def _read(self, k0: int, end: float) -> Tuple[np.ndarray, np.ndarray]:
        n = int(math.floor((end - self.t0) / self.dt + 1e-9)) + 1
        t = self.t0 + self.dt * np.arange(max(0, k0), n)
        if t.size == 0 or end - t[-1] > 1e-9:  # a last reading at the window's end
            t = np.append(t, end)
        return t, self.device.power_readings_w(t)  # type: ignore[attr-defined]

    def readings(self) -> Tuple[np.ndarray, np.ndarray]:
        return self._read(0, self._end())

    def recent(self, window_s: float) -> Tuple[np.ndarray, np.ndarray]:
        end = self._end()
        return self._read(int(math.ceil((end - window_s - self.t0) / self.dt - 1e-9)), end)


class _ThreadSampling:
    """A daemon thread polling device.power_w() on the device's (wall) clock."""

    def __init__(self, device: Device, dt_s: float) -> None:
        self.device, self.dt = device, dt_s
        self._t: List[float] = []
        self._p: List[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="undercap-power", daemon=True)
        self._e0: Optional[float] = None
        self._e1: Optional[float] = None
        self.set_aside = 0  # readings no sensor can give (plausible_w), not recorded
        self.first_set_aside_w = math.nan

    def start(self) -> None:
        self._e0 = self.device.energy_j()
        self._sample()  # a reading at the very start, before the thread gets going
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is None:
            try:
                self._sample()  # and one at the very end
                self._e1 = self.device.energy_j() if self._e0 is not None else None
            except Exception as e:  # noqa: BLE001 - reported below, like the thread's
                self._error = e
        if self._error is not None:
            raise DeviceError(f"power sampling failed: {self._error}") from self._error

    def _sample(self) -> None:
        p = float(self.device.power_w())
        t = self.device.now_s()
        if not plausible_w(p):  # a sensor glitch is no peak: set it aside, say so once
            self.set_aside += 1
            if self.set_aside == 1:
                self.first_set_aside_w = p
            if self.set_aside == 1 and self.device.name not in _WARNED_SET_ASIDE:
                _WARNED_SET_ASIDE.add(self.device.name)  # once a process, not per sampler
                print(
                    f"warning: {self.device.name}: set aside a power reading of {p:g} W, "
                    "which no sensor can give (later ones are counted)",
                    file=sys.stderr,
                    flush=True,
                )
            return
        with self._lock:
            self._t.append(t)
            self._p.append(p)

    def _run(self) -> None:
        next_t = time.monotonic() + self.dt
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            try:
                self._sample()
            except Exception as e:  # noqa: BLE001 - reported by stop()/stats()
                self._error = e
                return
            next_t += self.dt
            if next_t < time.monotonic():  # fell behind (slow sensor): do not burst
                next_t = time.monotonic() + self.dt

    def readings(self) -> Tuple[np.ndarray, np.ndarray]:
        if self._error is not None:
            raise DeviceError(f"power sampling failed: {self._error}") from self._error
        with self._lock:
            if not self._t and self.set_aside:
                raise DeviceError(
                    f"{self.device.name}: none of {self.set_aside} power readings was one a "
                    f"sensor can give (e.g. {self.first_set_aside_w:g} W); check its power "
                    "rails with `undercap devices`"
                )
            return np.array(self._t), np.array(self._p)

    def recent(self, window_s: float) -> Tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if not self._t:
                return np.empty(0), np.empty(0)
            i = bisect.bisect_left(self._t, self._t[-1] - window_s)
            return np.array(self._t[i:]), np.array(self._p[i:])

    def counter_energy_j(self) -> Optional[float]:
        if self._e0 is None:
            return None
        e1 = self._e1 if self._e1 is not None else self.device.energy_j()
        if e1 is None or e1 < self._e0:  # counter vanished or reset: integrate instead
            return None
        return float(e1 - self._e0)
