"""A race on the target: the signal no choice made from proxies alone has (issue 25).

The proxies' median r(b) (select/ensemble.py) ranks the configurations; where the
target scales unlike every proxy (the 8x8 digits among the image sets,
benchmarks/results/matrix) the ranking is wrong and no pooling fixes it. The device
trains on the target anyway, so the first part of training is spent learning which
of the proxies' best candidates the TARGET favours:

  1. Candidates (`plan_race`): the batch sizes the proxies disagree on: the median
     r(b)'s Algorithm 1 choice (the favourite) and each proxy's own, each b at its
     highest clock within the cap (core.per_batch), ranked by the median's predicted
     time, the best `max_candidates`. One candidate (every proxy agrees, or one
     proxy) or a zero budget: no race, the favourite trains.
  2. Budget: every candidate trains the same device time, `fraction` of the predicted
     training time of the median's choice, t(b, f) * r_med(b) * N(b_max) with N(b_max)
     the proxies' (the target's is unknown). Each candidate is a fork of the starting
     weights trained at its own (b, f) under the cap, evaluated on the target's
     held-out split at the training's own cadence.
  3. Judging (`judge`), from the curves within the budget only:
     a. the candidates train one after another in rank order; the first that reaches
        the target accuracy within its budget has won, training is over, and the
        ones after it never run;
     b. else the highest accuracy at each candidate's last evaluation within the
        budget; a challenger must beat the first candidate (the proxies' favourite)
        by more than `margin` of accuracy, else the favourite keeps it: the
        proxies are the prior, the race must overturn them; ties between
        challengers go to the better-ranked one;
     c. no candidate evaluated within the budget: the favourite (nothing was learnt).
  4. The winner continues from its own fork (its race samples are kept); the losers'
     device time is pure cost, counted in the time to accuracy (`race_cost`).

Successive halving (Jamieson and Talwalkar 2016; Li et al., Hyperband 2018) with two
candidates is this race in one rung; more rungs need more candidates than the
proxies' spread gives here. Pure: no I/O, no torch (tests/test_race.py, brute force
on recorded learning curves).
"""

import math
import typing
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from undercap.artifacts import Profile
from undercap.errors import UndercapError
from undercap.select.core import OURS, Choice, _check_relative, _select, per_batch
from undercap.select.ensemble import combined_relative

RACE = "race"

#: (device_time_s, samples, accuracy) at one evaluation of one candidate's fork
Point = typing.Tuple[float, int, float]


@dataclass(frozen=True)
class RacePlan:
    """The candidates (the proxies' favourite first) and each one's device-time budget."""

    candidates: Tuple[Choice, ...]
    budget_s: float  # device seconds each candidate trains in the race
    predicted_s: float  # the favourite's predicted training time the budget is a share of
    fraction: float
    margin: float

    @property
    def needed(self) -> bool:
        return len(self.candidates) > 1 and self.budget_s > 0

    @property
    def reason(self) -> str:
        """Why there is a race, or why not (progress output, train.json)."""
        if len(self.candidates) < 2:
            return "one candidate within the cap: no race"
        if self.budget_s <= 0:
            return "race off (budget 0)"
        bs = ", ".join(f"b={c.batch_size} at {c.freq_mhz:g} MHz" for c in self.candidates)
        return f"racing {bs} for {self.budget_s:.3g} s of device time each"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "candidates": [
                {"batch_size": c.batch_size, "freq_mhz": c.freq_mhz, "predicted_score": c.score}
                for c in self.candidates
            ],
            "budget_s": self.budget_s,
            "predicted_s": self.predicted_s,
            "fraction": self.fraction,
            "margin": self.margin,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Verdict:
    """Which candidate won and why; `index` into the plan's candidates."""

    index: int
    reached: Optional[float]  # device time at which the winner reached the target in the race
    scores: Tuple[Optional[float], ...]  # each candidate's accuracy judged (None: no evaluation)
    why: str

    def to_dict(self) -> Dict[str, Any]:
        return {
            "index": self.index,
            "reached_s": self.reached,
            "scores": list(self.scores),
            "why": self.why,
        }


def _check_fraction(fraction: float, margin: float, max_candidates: int) -> None:
    if not (math.isfinite(fraction) and 0 <= fraction < 1):
        raise UndercapError(f"race budget {fraction!r} must be a fraction in [0, 1)")
    if not (math.isfinite(margin) and 0 <= margin < 1):
        raise UndercapError(f"race margin {margin!r} must be an accuracy in [0, 1)")
    if max_candidates < 1:
        raise UndercapError(f"race candidates {max_candidates!r} must be at least 1")


def plan_race(
    profile: Profile,
    proxies: typing.Mapping[str, typing.Mapping[int, float]],
    power_limit_w: Optional[float],
    *,
    samples_bmax: float,
    fraction: float,
    max_candidates: int = 2,
    margin: float = 0.0,
    margin_w: Optional[float] = None,
) -> RacePlan:
    """Steps 1 and 2 of the module docstring. `proxies`: name -> r(b) (one proxy: no
    disagreement, no race); `samples_bmax`: the proxies' N(b_max) (their median).
    Raises InfeasibleError as Algorithm 1 does when nothing fits under the cap."""
    _check_fraction(fraction, margin, max_candidates)
    med = combined_relative(proxies)
    best = _select(profile, med, power_limit_w, OURS, margin_w)  # its errors, if any
    ranked = sorted(
        per_batch(profile, med, power_limit_w, margin_w=margin_w),
        key=lambda c: (c.score, -c.batch_size, -c.freq_mhz),  # Algorithm 1's order
    )
    picks = {
        _select(
            profile, _check_relative(r, f"efficiency of proxy {n}"), power_limit_w, OURS, margin_w
        ).batch_size
        for n, r in proxies.items()
    }
    cands = [c for c in ranked if c.batch_size == best.batch_size or c.batch_size in picks]
    predicted_s = float(best.score or 0.0) * float(samples_bmax)
    return RacePlan(
        tuple(cands[:max_candidates]), fraction * predicted_s, predicted_s, fraction, margin
    )


def _within(curve: typing.Sequence[Point], budget_s: float) -> List[Point]:
    return [p for p in curve if p[0] <= budget_s * (1 + 1e-9)]


def judge(
    curves: typing.Sequence[typing.Sequence[Point]],
    target_accuracy: float,
    budget_s: float,
    margin: float = 0.0,
) -> Verdict:
    """Step 3 of the module docstring. The candidates train one after another in rank
    order (curves[0] the favourite's), each from the starting weights until the budget
    or the target: curves[i] is candidate i's evaluations (device time since its fork,
    samples, accuracy) in order. The first to reach the target within the budget wins
    there and the ones after it never run (their curves are ignored)."""
    seen: List[Optional[List[Point]]] = []
    for i, c in enumerate(curves):
        within = _within(c, budget_s)
        hit = next((p for p in within if p[2] >= target_accuracy), None)
        seen.append(within)
        if hit is not None:
            scores = tuple(reach_score(x) for x in seen) + (None,) * (len(curves) - i - 1)
            return Verdict(i, hit[0], scores, "reached the target")
    scores = tuple(reach_score(x) for x in seen)
    if all(s is None for s in scores):
        return Verdict(0, None, scores, "no evaluation within the budget: the proxies' choice")
    bar = -math.inf if scores[0] is None else scores[0] + margin
    best = max((s for s in scores[1:] if s is not None), default=-math.inf)
    if best > bar:
        i = next(i for i, s in enumerate(scores) if i > 0 and s == best)
        return Verdict(i, None, scores, "most accurate at the end of the race")
    return Verdict(0, None, scores, "no challenger beat the proxies' choice by the margin")


def spent_in_race(verdict: Verdict, budget_s: float, lanes: int) -> List[float]:
    """Each candidate's device time in a race where each trains its whole budget (the
    offline replay; the device measures it): up to the winner if it reached the
    target, the winner's own time to the target, nothing after it."""
    if verdict.reached is None:
        return [budget_s] * lanes
    w = verdict.index
    return [budget_s] * w + [verdict.reached] + [0.0] * (lanes - w - 1)


def reach_score(curve: typing.Sequence[Point]) -> Optional[float]:
    """A candidate's accuracy as judged: its last evaluation's (None: none yet)."""
    return curve[-1][2] if curve else None


def race_cost(verdict: Verdict, spent_s: typing.Sequence[float]) -> float:
    """Device seconds the race cost beyond the winner's own training: the losers' time
    (the winner's is kept: it continues from its fork)."""
    return math.fsum(s for i, s in enumerate(spent_s) if i != verdict.index)
