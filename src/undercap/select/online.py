"""The `online` rule (issue 36): r(b) corrected mid-run by the target's own curve.

The device trains on the target anyway, so every evaluation of the running run is a
free measurement of how the TARGET learns at the running batch size b. The rule:

  1. Start as the ensemble rule does (select/ensemble.py): Algorithm 1 on the median
     over the proxies of r_p(b). With no evaluation yet every proxy weighs 1/P and
     the weighted median below IS that median, so the first choice is the default's.
  2. At each evaluation, weigh each proxy p by how well its recorded curve at b
     predicts the target's observed prefix (`proxy_weights`): a Gaussian likelihood
     of each observed point under p's seed spread (mean and standard deviation over
     p's estimate seeds, plus a floor `sigma` for evaluation noise), after aligning
     scales: accuracy as a fraction of each dataset's OWN target accuracy, samples
     either raw or as a fraction of each dataset's N(b_max) (`x_scale`). Weights are
     the normalised likelihoods (Bayes' rule with a uniform prior over the proxies),
     or `tempered`: the likelihood to the power 1/K for K points, i.e. each point
     counts once as if the K points were one, since successive evaluations of one
     run are strongly correlated, not independent draws (Grunwald 2012's "safe
     Bayes" tempering; Holmes and Walker 2017 for the power likelihood).
  3. Re-pool r(b) as the WEIGHTED median of the r_p(b) (`pooled_relative`): it keeps
     the median's breakdown point against one unlike proxy unless the target's own
     curve puts the weight there.
  4. Switch (`decide`) when the re-pooled choice (b', f') under the cap predicts a
     remaining time shorter than the running one's by more than `margin`, under the
     progress model of train/schedule.py: after s samples at b the fraction done is
     p = s / N(b), and (1 - p) N(b') samples remain at b'. (1 - p) is common to every
     candidate, so the choice is Algorithm 1 on the re-pooled r(b); p >= 1 (the
     model says the run is due to end) never switches.

Pure functions on plain numbers (no profile, no I/O, no torch): the caller passes the
feasible candidates under the cap, each b at its best feasible clock
(select.core.per_batch). On the device path (train --from-selection --online):
Python 3.6. Tested against brute force in tests/test_online_select.py; replayed on the
matrix's stored curves by benchmarks/matrix_online.py.
"""

import math
import typing
from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

from undercap.errors import UndercapError

#: (samples trained, accuracy) of one evaluation
Point = Tuple[float, float]
#: b -> (freq_mhz, time_per_sample_s): each feasible b at its best feasible clock
Feasible = typing.Mapping[int, Tuple[float, float]]
SCHEMES = ("likelihood", "tempered", "uniform")
X_SCALES = ("samples", "bmax")
#: cumulative weights this close to one half are a tie (float noise in 1/P sums)
HALF_TOL = 1e-9


@dataclass(frozen=True)
class ProxyCurves:
    """One proxy's estimate: r_p(b), its recorded curves, its target and N(b_max)."""

    name: str
    relative: typing.Mapping[int, float]
    curves: typing.Mapping[int, Sequence[Sequence[Point]]]  # b -> per seed
    target_accuracy: float
    samples_bmax: float  # mean over seeds of N_p(b_max)


@dataclass(frozen=True)
class Weighting:
    """How proxies are weighed from the observed prefix (module docstring, step 2)."""

    scheme: str = "tempered"
    x_scale: str = "samples"
    sigma: float = 0.02  # floor of the predictive std, in units of the target accuracy

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES or self.x_scale not in X_SCALES or not self.sigma > 0:
            raise UndercapError(f"bad weighting {self}")


@dataclass(frozen=True)
class Weights:
    weights: Dict[str, float]  # proxy -> weight, summing to 1
    log_likelihood: Dict[str, float]  # proxy -> summed log-likelihood of the prefix
    points: int


@dataclass(frozen=True)
class Decision:
    switch: bool
    batch_size: int  # where the run continues (the current b when not switching)
    freq_mhz: float
    progress: float  # p, the fraction of the work done under the pooled r(b)
    remaining_s: float  # predicted remaining time at (batch_size, freq_mhz)
    current_remaining_s: float  # predicted remaining time staying where it is


def interpolate(curve: Sequence[Point], x: float) -> float:
    """Linear interpolation of a (samples, accuracy) curve at x, holding its ends
    (a stored curve stops where it reached its target: it holds that value after)."""
    if not curve:
        raise UndercapError("empty curve")
    if x <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return curve[-1][1]


def predicted(proxy: ProxyCurves, b: int, samples: float, scale: float) -> Tuple[float, float]:
    """Mean and std over p's seeds of its accuracy / its target at `samples * scale`."""
    ys = [interpolate(c, samples * scale) / proxy.target_accuracy for c in proxy.curves[b]]
    mean = math.fsum(ys) / len(ys)
    var = math.fsum((y - mean) ** 2 for y in ys) / max(1, len(ys) - 1)
    return mean, math.sqrt(var)


def point_log_likelihoods(
    proxy: ProxyCurves,
    b: int,
    prefix: Sequence[Point],
    target_accuracy: float,
    samples_bmax: float,
    weighting: Weighting,
) -> Tuple[float, ...]:
    """log N(y_k; mu_p(x_k), sd_p^2 + sigma^2) for each observed (n_k, a_k), y = a / the
    target's accuracy; x aligned per `weighting.x_scale` (`samples_bmax`: the
    target's N(b_max) as guessed before training, e.g. the proxies' median)."""
    scale = proxy.samples_bmax / samples_bmax if weighting.x_scale == "bmax" else 1.0
    out = []
    for n, a in prefix:
        mu, sd = predicted(proxy, b, n, scale)
        var = sd * sd + weighting.sigma**2
        out.append(-0.5 * ((a / target_accuracy - mu) ** 2 / var + math.log(2 * math.pi * var)))
    return tuple(out)


def weights_from(log_lik: typing.Mapping[str, float], points: int, scheme: str) -> Weights:
    """Normalised likelihoods (tempered: to the power 1/points); uniform without points."""
    if not log_lik:
        raise UndercapError("no proxies to weigh")
    power = 0.0 if scheme == "uniform" or points == 0 else 1.0
    if scheme == "tempered" and points:
        power = 1.0 / points
    top = max(log_lik.values())
    raw = {p: math.exp(power * (v - top)) for p, v in log_lik.items()}  # max term is 1
    total = math.fsum(raw.values())
    return Weights({p: w / total for p, w in raw.items()}, dict(log_lik), points)


def proxy_weights(
    proxies: Sequence[ProxyCurves],
    b: int,
    prefix: Sequence[Point],
    target_accuracy: float,
    samples_bmax: float,
    weighting: Weighting = Weighting(),
) -> Weights:
    """Each proxy's weight from the target's observed prefix at batch size b."""
    ll = {
        p.name: math.fsum(
            point_log_likelihoods(p, b, prefix, target_accuracy, samples_bmax, weighting)
        )
        for p in proxies
    }
    return weights_from(ll, len(prefix), weighting.scheme)


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The midpoint of the lower and upper weighted medians: with equal weights exactly
    statistics.median (the mean of the middle two for an even count)."""
    pairs = sorted(zip(values, weights))
    total, cum, lower = math.fsum(weights), 0.0, None
    for v, w in pairs:
        cum += w / total
        if lower is None and cum >= 0.5 - HALF_TOL:
            lower = v
        if cum > 0.5 + HALF_TOL:
            return (lower + v) / 2  # type: ignore[operator]
    return pairs[-1][0]


def pooled_relative(
    proxies: Sequence[ProxyCurves], weights: typing.Mapping[str, float], how: str = "median"
) -> Dict[int, float]:
    """r(b) pooled over the proxies with `weights`, at the b every proxy has."""
    common = set.intersection(*(set(p.relative) for p in proxies))
    out = {}
    for b in sorted(common):
        vals = [p.relative[b] for p in proxies]
        ws = [weights[p.name] for p in proxies]
        if how == "median":
            out[b] = weighted_median(vals, ws)
        else:
            out[b] = math.fsum(v * w for v, w in zip(vals, ws)) / math.fsum(ws)
    return out


def best_candidate(feasible: Feasible, relative: typing.Mapping[int, float]) -> int:
    """Algorithm 1 on given candidates: smallest t * r, ties to the larger b (core)."""
    cands = [b for b in feasible if b in relative]
    if not cands:
        raise UndercapError("no feasible batch size has an r(b)")
    return min(cands, key=lambda b: (feasible[b][1] * relative[b], -b))


def decide(
    feasible: Feasible,
    relative: typing.Mapping[int, float],
    current_b: int,
    samples_done: float,
    samples_bmax: float,
    margin: float,
) -> Decision:
    """Switch to Algorithm 1's choice on `relative` when its predicted remaining time
    is below (1 - margin) x staying at `current_b` (module docstring, step 4)."""
    if current_b not in feasible or current_b not in relative:
        raise UndercapError(f"the running batch size {current_b} is not a candidate")
    p = samples_done / (relative[current_b] * samples_bmax)
    left = max(0.0, 1.0 - p) * samples_bmax

    def remaining(b: int) -> float:
        return feasible[b][1] * relative[b] * left

    stay = remaining(current_b)
    b = best_candidate(feasible, relative)
    go = p < 1.0 and b != current_b and remaining(b) < (1.0 - margin) * stay
    to = b if go else current_b
    return Decision(go, to, feasible[to][0], p, remaining(to), stay)
