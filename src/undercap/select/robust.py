"""Selection rules that use what Algorithm 1 ignores: r(b)'s spread over seeds, and
the gradient noise scale measured on the target (estimate/gns.py). Beyond the paper;
the paper's rule (core.select_ours) stays the default (see benchmarks/matrix.py for
the measured comparison).

Spread rule (`select_spread`), exactly:
  1. Algorithm 1's candidates: per batch size b the highest feasible frequency f_b,
     predicted time s_b = t(b, f_b) * r(b) with r(b) the mean over seeds;
  2. its standard error se_b = t(b, f_b) * sd_b / sqrt(n_b), sd_b the sample standard
     deviation of the per-seed ratios N_s(b) / N(b_ref) and n_b their count;
  3. the candidates within the noise of the best: s_b - s_best <= k * sqrt(se_b^2 +
     se_best^2) (k = defaults.SPREAD_K standard errors; the best is among them);
  4. among those the smallest worst case w_b = t(b, f_b) * max_s r_s(b); ties by
     s_b, then the larger batch, then the higher frequency (core's tie-break).
  Without a spread (one seed) it is Algorithm 1.

Noise-scale rules: r_gns(b) = (1 + b/B) / (1 + b_max/B) from B_simple (McCandlish et
al. 2018, Eq. 2.11), and its interval from B's bootstrap interval (r_gns rises with B
for b < b_max). They "disagree" at b when the proxy's seed range [min_s r_s(b),
max_s r_s(b)] and r_gns's interval do not overlap.
  * `gns_target_relative`: where they disagree at any candidate b, rank with r_gns of
    the target (trust the target side); else keep r(b).
  * `gns_transfer_relative`: the noise scale as a RELATIVE measure between proxy and
    target: when the target's B interval and the proxy's B interval (both measured
    the same way from the same starting weights) do not overlap, fit B_fit to the
    proxy's r(b) (least squares in log r), scale it by B_target / B_proxy, and
    multiply r(b) by r_model(b; B_fit * B_target / B_proxy) / r_model(b; B_fit); else
    keep r(b). The B measured at the start of training is smaller than the B that
    fits a whole run's r(b) (measured: benchmarks/results/matrix), so only the ratio
    between datasets is used.
Both return a corrected r for Algorithm 1 (core.select_ours) plus why.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from typing import Any, Optional

from undercap import defaults
from undercap.artifacts import Profile
from undercap.select.core import Choice, per_batch

SPREAD = "spread"
# b (int or str) -> {"std", "min", "max", "n"}; typing's Mapping: a runtime alias on 3.8
Spread = typing.Mapping[Any, typing.Mapping[str, Any]]


def _spread_of(spread: Optional[Spread], b: int) -> Optional[Mapping[str, Any]]:
    if not spread:
        return None
    return spread.get(b, spread.get(str(b)))


def _se_and_worst(c: Choice, spread: Optional[Spread]) -> tuple[float, float]:
    s = _spread_of(spread, c.batch_size)
    t, r = c.time_per_sample_s, float(c.relative_samples or 0.0)
    if s is None or int(s.get("n", 1)) < 2:
        return 0.0, t * r
    worst = max(r, float(s.get("max", r)))
    return t * float(s["std"]) / math.sqrt(int(s["n"])), t * worst


def select_spread(
    profile: Profile,
    relative: Mapping[int, float],
    spread: Optional[Spread],
    power_limit_w: Optional[float],
    *,
    k: float = defaults.SPREAD_K,
    margin_w: Optional[float] = None,
) -> Choice:
    """The spread rule (module docstring): among the configurations whose predicted
    time is within k standard errors of Algorithm 1's, the smallest worst case.
    `margin_w` as in core.per_batch (None: each row's own safety margin)."""
    from undercap.select.core import select_ours

    best = select_ours(profile, relative, power_limit_w, margin_w=margin_w)  # raises if none
    cands = per_batch(profile, relative, power_limit_w, method=SPREAD, margin_w=margin_w)
    se = {c.batch_size: _se_and_worst(c, spread) for c in cands}
    se_best = se[best.batch_size][0]
    near = [
        c
        for c in cands
        if (c.score or 0.0) - (best.score or 0.0)
        <= k * math.sqrt(se[c.batch_size][0] ** 2 + se_best**2) + 1e-15
    ]
    return min(
        near,
        key=lambda c: (se[c.batch_size][1], c.score, -c.batch_size, -c.freq_mhz),
    )


# --- the gradient noise scale -------------------------------------------------------------
def r_model(b: float, b_max: float, b_noise: Optional[float]) -> float:
    """(1 + b/B) / (1 + b_max/B); B = None (unbounded) gives 1, B = 0 gives b / b_max."""
    if b_noise is None or math.isinf(b_noise):
        return 1.0
    if b_noise <= 0:
        return b / b_max
    return (1 + b / b_noise) / (1 + b_max / b_noise)


def disagreements(
    relative: Mapping[int, float],
    spread: Optional[Spread],
    b_low: Optional[float],
    b_high: Optional[float],
) -> dict[int, tuple[float, float, float, float]]:
    """Batch sizes where the proxy's seed range of r(b) and r_gns's interval (from B's
    interval [b_low, b_high], None = unbounded) do not overlap:
    b -> (proxy lo, proxy hi, gns lo, gns hi)."""
    b_max = max(relative)
    out = {}
    for b, r in sorted(relative.items()):
        s = _spread_of(spread, b)
        lo, hi = (r, r) if s is None else (float(s.get("min", r)), float(s.get("max", r)))
        g_lo, g_hi = r_model(b, b_max, b_low), r_model(b, b_max, b_high)
        if hi < g_lo or lo > g_hi:
            out[b] = (lo, hi, g_lo, g_hi)
    return out


def gns_target_relative(
    relative: Mapping[int, float],
    spread: Optional[Spread],
    b_noise: Optional[float],
    b_low: Optional[float],
    b_high: Optional[float],
) -> tuple[dict[int, float], str]:
    """r_gns of the target where it disagrees with the proxy's r(b) beyond both
    spreads at some batch size, else r(b) unchanged; and why."""
    rel = {int(b): float(r) for b, r in relative.items()}
    if b_noise is None:
        return rel, "no noise scale (|G|^2 estimate not positive): r(b) kept"
    diff = disagreements(rel, spread, b_low, b_high)
    if not diff:
        return rel, "agree within their spreads: r(b) kept"
    b_max = max(rel)
    return (
        {b: r_model(b, b_max, b_noise) for b in rel},
        f"disagree at b={sorted(diff)}: ranked with r_gns(b) of the target (B={b_noise:.3g})",
    )


def fit_noise_scale(relative: Mapping[int, float]) -> float:
    """The B whose r_model best fits r(b) in least squares of log r (golden-section
    search on log B over [1e-2, 1e7]; r_model is monotone in B for each b)."""
    b_max = max(relative)

    def loss(log_b: float) -> float:
        b_noise = math.exp(log_b)
        return math.fsum(
            (math.log(r) - math.log(r_model(b, b_max, b_noise))) ** 2 for b, r in relative.items()
        )

    lo, hi = math.log(1e-2), math.log(1e7)
    grid = [lo + (hi - lo) * i / 200 for i in range(201)]
    i = min(range(len(grid)), key=lambda j: loss(grid[j]))
    a, c = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        x1, x2 = c - g * (c - a), a + g * (c - a)
        if loss(x1) <= loss(x2):
            c = x2
        else:
            a = x1
    return math.exp((a + c) / 2)


def _overlap(
    a: tuple[Optional[float], Optional[float]], b: tuple[Optional[float], Optional[float]]
) -> bool:
    def hi(x: Optional[float]) -> float:
        return math.inf if x is None else x

    return not (hi(a[1]) < (b[0] or 0.0) or hi(b[1]) < (a[0] or 0.0))


def gns_transfer_relative(
    relative: Mapping[int, float],
    target: tuple[Optional[float], Optional[float], Optional[float]],
    proxy: tuple[Optional[float], Optional[float], Optional[float]],
) -> tuple[dict[int, float], str]:
    """r(b) corrected by the ratio of the target's to the proxy's noise scale (each a
    (B, low, high) triple) when their intervals do not overlap; else unchanged."""
    rel = {int(b): float(r) for b, r in relative.items()}
    (bt, bt_lo, bt_hi), (bp, bp_lo, bp_hi) = target, proxy
    if bt is None or bp is None or bp <= 0 or bt <= 0:
        return rel, "no finite noise scale on both sides: r(b) kept"
    if _overlap((bt_lo, bt_hi), (bp_lo, bp_hi)):
        return rel, f"target B={bt:.3g} and proxy B={bp:.3g} agree within their spreads: r(b) kept"
    b_max = max(rel)
    b_fit = fit_noise_scale(rel)
    scaled = b_fit * bt / bp
    out = {b: r * r_model(b, b_max, scaled) / r_model(b, b_max, b_fit) for b, r in rel.items()}
    return out, (
        f"target B={bt:.3g} vs proxy B={bp:.3g}: r(b) rescaled from the fitted B={b_fit:.3g} "
        f"to {scaled:.3g}"
    )
