"""What "best" means: least time (the paper's), least energy, least energy x time, or
least time within an energy budget. Pure functions of the profile and r(b).

Per sample of N(b_max) (the same units as Algorithm 1's score t * r, Sec. 4.3), a
configuration (b, f) costs
    time    t(b, f) * r(b)                     seconds
    energy  P_mean(b, f) * t(b, f) * r(b)      joules (mean board power while training)
    edp     energy * time                      the energy-delay product (Gonzalez &
                                               Horowitz, IEEE JSSC 1996)
and each objective picks the feasible (b, f) that minimises its cost. For time the
highest feasible clock of each batch size wins (Algorithm 1); for energy a lower
clock can win, since dynamic power falls with V(f)^2 f while the static board power
is paid for longer (the DVFS "race to idle" trade-off), so every feasible row is a
candidate.

An energy budget (a battery: `energy_budget_j`) needs absolute energy, hence N(b_max): the
samples the largest batch takes to the target (`samples_bmax`, e.g. the estimate's mean;
the proxy's, so the check is as good as the proxy's scale): energy_to_target(b, f) =
P_mean * t * r(b) * N(b_max). The fastest row within the budget wins; when none fits,
InfeasibleError names the least energy any feasible configuration needs.
"""

from dataclasses import replace
from typing import Iterable, Mapping, Optional, Tuple

from undercap.artifacts.profile import Profile, ProfileRow
from undercap.errors import InfeasibleError, UndercapError
from undercap.select.core import (
    OURS,
    Choice,
    _best,
    _by_batch,
    _check_margin,
    _check_relative,
    _choice,
    _select,
    _within,
    best_over_precisions,
    check_power_limit_w,
)

OBJECTIVES = ("time", "energy", "edp")


def cost(row: ProfileRow, r: float, objective: str) -> float:
    """The objective's cost of training with `row` per sample of N(b_max)."""
    time_s = row.time_per_sample_s * r
    energy_j = row.mean_power_w * time_s
    costs = {"time": time_s, "energy": energy_j, "edp": energy_j * time_s}
    if objective not in costs:
        raise UndercapError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    return costs[objective]


def energy_to_target_j(row: ProfileRow, r: float, samples_bmax: float) -> float:
    """Predicted energy to the target: P_mean * t * r(b) * N(b_max)."""
    return row.mean_power_w * row.time_per_sample_s * r * samples_bmax


def _candidates(
    profile: Profile,
    relative: Mapping[int, float],
    limit: Optional[float],
    margin_w: Optional[float] = None,
) -> Iterable[Tuple[ProfileRow, float]]:
    rel = _check_relative(relative, "efficiency")
    for b, rows in sorted(_by_batch(profile).items()):
        if b in rel:
            yield from ((row, rel[b]) for row in rows if _within(row, limit, margin_w))


def choose(
    profile: Profile,
    relative: Mapping[int, float],
    power_limit_w: Optional[float],
    *,
    objective: str = "time",
    energy_budget_j: Optional[float] = None,
    samples_bmax: Optional[float] = None,
    method: str = OURS,
    margin_w: Optional[float] = None,
    precision: Optional[str] = None,
) -> Choice:
    """In `precision` (None: the profile's own, fp32 where it has several; "auto":
    among the profile's precisions too), the feasible configuration that is best for
    `objective`: `"time"` minimises t(b, f) * r(b) (Algorithm 1), `"energy"` the mean
    board power times that, `"edp"` energy x time. With `energy_budget_j` (a battery;
    needs `samples_bmax`, N(b_max)), the fastest configuration whose energy to the
    target fits the budget. Feasible: profiled peak plus safety margin within the
    limit, the margin being `margin_w`, else each row's measured margin."""
    limit = check_power_limit_w(power_limit_w)
    margin_w = _check_margin(margin_w)
    if objective not in OBJECTIVES:
        raise UndercapError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")

    def choose_in(sub: Profile) -> Choice:
        if energy_budget_j is not None:
            return _within_budget(
                sub, relative, limit, energy_budget_j, samples_bmax, method, margin_w
            )
        if objective == "time":  # Algorithm 1 itself: the highest feasible clock per b
            return _select(sub, relative, limit, method, margin_w)
        best = _best(
            replace(
                _choice(method, row, r, limit, margin_w),
                score=cost(row, r, objective),
                objective=objective,
            )
            for row, r in _candidates(sub, relative, limit, margin_w)
        )
        return best if best is not None else _select(sub, relative, limit, method, margin_w)

    return best_over_precisions(profile, precision, choose_in)


def _within_budget(
    profile: Profile,
    relative: Mapping[int, float],
    limit: Optional[float],
    budget_j: float,
    samples_bmax: Optional[float],
    method: str,
    margin_w: Optional[float] = None,
) -> Choice:
    if not budget_j > 0:
        raise UndercapError(f"energy budget must be a positive number of joules, got {budget_j}")
    if samples_bmax is None or not samples_bmax > 0:
        raise UndercapError(
            "an energy budget needs N(b_max), the samples the largest batch takes to the "
            "target (the efficiency artifact's samples_to_target)"
        )
    feasible = list(_candidates(profile, relative, limit, margin_w))
    if not feasible:
        return _select(profile, relative, limit, method, margin_w)  # the infeasible error
    best = _best(
        _choice(method, row, r, limit, margin_w)  # scored by time: t * r
        for row, r in feasible
        if energy_to_target_j(row, r, samples_bmax) <= budget_j
    )
    if best is not None:
        return best
    row, r = min(feasible, key=lambda x: energy_to_target_j(x[0], x[1], samples_bmax))
    need = energy_to_target_j(row, r, samples_bmax)
    raise InfeasibleError(
        f"no configuration reaches the target within {budget_j:g} J: the least energy "
        f"needed is {need:.0f} J (batch size {row.batch_size} at {row.freq_mhz:g} MHz"
        f"{'' if limit is None else f', under {limit:g} W'}); raise --energy-budget-j to at "
        "least that"
    )
