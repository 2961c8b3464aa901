"""The safety margin between a configuration's profiled peak power and the limit, and
the statistics a measurement stops on. numpy only.

A profile measures a configuration for a second or two; training runs at it for hours.
A limit is judged on the robust peak (devices/sampler.py), the highest mean power over
a window w, and over a long run the largest of M window means lies several standard
deviations above their level (the maximum of M Gaussian values grows like
sqrt(2 ln M); Leadbetter, Lindgren & Rootzen, "Extremes and Related Properties of
Random Sequences", 1983): a peak profiled a hair under the limit predicts a run over it.

The margin of a row, from what its own measurement observed (docs/concepts/safety.md):

    margin       = z * sigma_window + spread
    sigma_window = noise / sqrt(n), n = w / max(1 / sampling rate, sensor update
                 interval) independent readings per window while training; noise: one
                 reading's std around the load's own shape (reading_noise_w)
    z            = Phi^-1(1 - alpha / M), M = run_s / w windows: with probability at
                 least 1 - alpha no window of the run rises more than z sigma above the
                 level from noise alone (a union bound over the windows)
    spread       std of the peak over the measurement's repeated windows (pieces of
                 max(w, one step)): how well one measurement pins the peak

Selection treats (b, f) as feasible only when peak + margin <= limit (select/core.py);
`--power-margin-w` overrides the margin.
"""

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict

import numpy as np

from undercap import defaults
from undercap._compat import normal_inv_cdf
from undercap.devices.sampler import summarize

# Student t quantiles t_{0.975, df} for df = 1..30 (any statistics table); beyond, the
# normal quantile 1.96 is within 2% of them.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """Two-sided 95% Student t quantile with `df` degrees of freedom (df >= 1)."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def ci_halfwidth(values: np.ndarray) -> float:
    """Half-width of the 95% confidence interval of the mean of `values` (inf for
    fewer than two values: no interval yet)."""
    n = int(values.size)
    if n < 2:
        return math.inf
    return t975(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)


def reading_noise_w(times_s: np.ndarray, power_w: np.ndarray, step_s: float) -> float:
    """One reading's noise (std) around the load's own shape. A training step repeats
    the same kernels, so power is periodic in the step (the ripple) and what differs
    from the step's mean profile at the same phase is noise. Readings are binned by
    phase (at least 8 readings a bin, at most one bin per reading of a step) and the
    residuals' std taken with the bins' degrees of freedom removed: ripple left in
    would inflate the margin, though a window averages it away."""
    p = np.asarray(power_w, dtype=np.float64)
    t = np.asarray(times_s, dtype=np.float64)
    if p.size < 3:
        return 0.0
    spacing = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    per_step = step_s / spacing if spacing > 0 and step_s > 0 else 1.0
    nb = int(max(1, min(math.floor(per_step + 1e-6), p.size // 8)))
    phase = np.mod((t - t[0]) / step_s, 1.0) if step_s > 0 else np.zeros(p.size)
    bins = np.mod(np.floor(phase * nb + 1e-6).astype(np.int64), nb)  # round-off at edges
    counts = np.bincount(bins, minlength=nb)
    means = np.bincount(bins, weights=p, minlength=nb) / np.maximum(counts, 1)
    residual = p - means[bins]
    dof = p.size - int(np.count_nonzero(counts))
    return math.sqrt(float(np.sum(residual**2)) / max(dof, 1))


def repeated_peaks(
    times_s: np.ndarray, power_w: np.ndarray, piece_s: float, window_s: float, start_s: float
) -> np.ndarray:
    """The robust peak of each consecutive piece of `piece_s` of the readings from
    `start_s` (whole pieces only): the "repeated windows" a measurement's peak is
    checked over."""
    if times_s.size < 2 or piece_s <= 0:
        return np.empty(0)
    t0 = float(start_s)
    k = int(math.floor((float(times_s[-1]) - t0) / piece_s + 1e-9))
    peaks = []
    for i in range(k):
        lo, hi = t0 + i * piece_s, t0 + (i + 1) * piece_s
        inside = (times_s >= lo - 1e-12) & (times_s <= hi + 1e-12)
        if int(inside.sum()) >= 2:
            peaks.append(summarize(times_s[inside], power_w[inside], window_s).peak_w)
    return np.asarray(peaks, dtype=np.float64)


@dataclass(frozen=True)
class MarginPolicy:
    """How a row's margin is sized: the power window, the sensor, the training
    sampler's rate and the run the margin must hold over (module docstring)."""

    window_s: float
    sensor_update_s: float
    train_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ
    run_s: float = defaults.MARGIN_RUN_S
    alpha: float = defaults.MARGIN_ALPHA

    @property
    def z(self) -> float:
        windows = max(1.0, self.run_s / self.window_s)
        return normal_inv_cdf(1.0 - self.alpha / windows)

    def window_noise_w(self, noise_w: float, rate_hz: float) -> float:
        """Noise of one window's mean when sampling at `rate_hz`."""
        spacing = max(1.0 / rate_hz, self.sensor_update_s)
        return noise_w / math.sqrt(max(1.0, self.window_s / spacing))

    def margin_w(self, noise_w: float, spread_w: float) -> float:
        return self.z * self.window_noise_w(noise_w, self.train_rate_hz) + spread_w

    def to_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "z": self.z}


def near_band_w(row: Any, policy: MarginPolicy, sample_rate_hz: float) -> float:
    """How far from the limit a row's peak + margin may lie and still be noise (such a
    row bounds nothing in the efficient sweep): three standard deviations of the peak,
    its spread over repeated windows or one window's noise at the profiling rate."""
    noise = row.noise_w or 0.0
    sigma = max(row.peak_spread_w or 0.0, policy.window_noise_w(noise, sample_rate_hz))
    return 3.0 * sigma
