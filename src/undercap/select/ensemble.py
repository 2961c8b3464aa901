"""The `ensemble` rule: one (b, f) from several proxies' r(b), chosen so that one bad
proxy cannot spoil it (beyond the paper; benchmarks/results/matrix measures it).

Each proxy p gives its own r_p(b) = N_p(b) / N_p(b_max). Exactly:
  1. The batch sizes with an r(b) on EVERY proxy (a batch size one proxy never trained
     to the target could be arbitrarily slow there: out).
  2. r_med(b) = the median over the proxies of r_p(b) (the mean of the middle two for
     an even count).
  3. Algorithm 1 with r_med (select/core.py, its tie-breaking included).
Reported beside the choice, not used to make it: each proxy's own choice and the
regret the chosen (b, f) risks under it (ProxyView; the "% over the fastest" of a
matrix cell, if the target scaled like that proxy).

Why the median: the proxies are equally plausible guesses of how the unseen target's
N(b) scales, and the failure to guard against is ONE of them being unlike the target
(benchmarks/results/matrix). The median's breakdown point is 50% (Huber, Robust
Statistics, 1981): with P >= 3 proxies, however wrong one proxy's r(b) is, r_med(b)
stays within the others' range at every b. The mean moves without bound with one
proxy, and minimax regret (Savage 1951) follows the most extreme one (breakdown point
0); both are controls in benchmarks/matrix_cells.py. With two proxies the median is
the mean: two that disagree cannot tell which is the outlier (say so to the user).

The seed spread of each r(b) is not used (docs/results/removed.md: the spread rule).
Pure: no I/O, no numpy, no torch (tests/test_ensemble_select.py, brute force).
"""

import math
import statistics
import typing
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from undercap.artifacts import Profile
from undercap.errors import ArtifactError, UndercapError
from undercap.select.core import OURS, Choice, _check_relative, _select, per_batch

ENSEMBLE = "ensemble"
#: regrets closer than this are a tie (floating-point noise in t * r ratios)
TIE_TOL = 1e-12
# typing's Mapping: a subscripted collections.abc.Mapping fails at runtime on Python 3.8
Proxies = typing.Mapping[str, typing.Mapping[int, float]]  # proxy name -> r(b)


@dataclass(frozen=True)
class ProxyView:
    """One proxy's view of the ensemble's choice."""

    name: str
    preferred: Choice  # what Algorithm 1 picks from this proxy's r(b) alone
    regret: float  # the chosen (b, f)'s t * r_p / the best candidate's under p - 1

    def to_dict(self) -> Dict[str, Any]:
        pref = self.preferred
        return {
            "name": self.name,
            "preferred": {"batch_size": pref.batch_size, "freq_mhz": pref.freq_mhz},
            "regret": self.regret,
        }


@dataclass(frozen=True)
class Ensemble:
    """A rule's choice from several proxies and what each proxy says about it."""

    choice: Choice
    proxies: Tuple[ProxyView, ...]
    relative: Dict[int, float]  # the r(b) the choice was ranked with (r_med for the rule)

    @property
    def worst_regret(self) -> float:
        return max(p.regret for p in self.proxies)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "rule": self.choice.method,
            "batch_size": self.choice.batch_size,
            "freq_mhz": self.choice.freq_mhz,
            "worst_regret": self.worst_regret,
            "relative": {str(b): r for b, r in sorted(self.relative.items())},
            "proxies": [p.to_dict() for p in self.proxies],
        }


def _checked(proxies: Proxies) -> Dict[str, Dict[int, float]]:
    if not proxies:
        raise UndercapError("the ensemble rule needs at least one proxy's r(b)")
    return {str(n): _check_relative(r, f"efficiency of proxy {n}") for n, r in proxies.items()}


def combined_relative(
    proxies: Proxies, how: Callable[[List[float]], float] = statistics.median
) -> Dict[int, float]:
    """`how` (default the median) over the proxies of r_p(b), at the batch sizes every
    proxy has (steps 1 and 2)."""
    rel = _checked(proxies)
    common = sorted(set.intersection(*(set(r) for r in rel.values())))
    if not common:
        raise ArtifactError(
            "no batch size has an r(b) on every proxy "
            f"({'; '.join(f'{n}: {sorted(r)}' for n, r in rel.items())}); estimate the same "
            "batch sizes on every proxy"
        )
    return {b: float(how([r[b] for r in rel.values()])) for b in common}


def regret_table(
    profile: Profile,
    proxies: Proxies,
    power_limit_w: Optional[float],
    *,
    margin_w: Optional[float] = None,
) -> Tuple[Tuple[Choice, ...], Dict[str, Tuple[float, ...]]]:
    """The candidates (every common b at its highest feasible clock) and, per proxy,
    each candidate's regret t * r_p(b) / min over the candidates - 1."""
    rel = _checked(proxies)
    cands = per_batch(profile, combined_relative(rel), power_limit_w, margin_w=margin_w)
    regrets = {}
    for name, r in rel.items():
        times = [c.time_per_sample_s * r[c.batch_size] for c in cands]
        best = min(times, default=math.inf)
        regrets[name] = tuple(s / best - 1.0 for s in times)
    return cands, regrets


def _views(
    profile: Profile, rel: Dict[str, Dict[int, float]], chosen: Choice, limit: Any, margin_w: Any
) -> Tuple[ProxyView, ...]:
    cands, regrets = regret_table(profile, rel, limit, margin_w=margin_w)
    i = [(c.batch_size, c.freq_mhz) for c in cands].index((chosen.batch_size, chosen.freq_mhz))
    return tuple(
        ProxyView(n, _select(profile, r, limit, OURS, margin_w), regrets[n][i])
        for n, r in rel.items()
    )


def _ranked(
    profile: Profile,
    proxies: Proxies,
    limit: Optional[float],
    margin_w: Optional[float],
    how: Callable[[List[float]], float],
    method: str,
) -> Ensemble:
    rel = _checked(proxies)
    combined = combined_relative(rel, how)
    chosen = replace(_select(profile, combined, limit, OURS, margin_w), method=method)
    return Ensemble(chosen, _views(profile, rel, chosen, limit, margin_w), combined)


def select_ensemble(
    profile: Profile,
    proxies: Proxies,
    power_limit_w: Optional[float],
    *,
    margin_w: Optional[float] = None,
) -> Ensemble:
    """The ensemble rule (module docstring): Algorithm 1 on the median over `proxies`
    (name -> r(b)) of r(b). Raises InfeasibleError as Algorithm 1 does."""
    return _ranked(profile, proxies, power_limit_w, margin_w, statistics.median, ENSEMBLE)
