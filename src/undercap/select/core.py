"""Choose the batch size and GPU frequency: the paper's Algorithm 1 and the oracle.

Ahmed et al., "Accelerated Training on Low-Power Edge Devices" (TMLR 2025), Sec. 4:
time-to-accuracy splits as T(b, f) = t(b, f) * N(b), with t (seconds per sample) and
the peak power P(b, f) measured on the device (the profile, Sec. 4.1) and the ratio
r(b) = N(b) / N(b_max) estimated on a proxy dataset (Sec. 4.2). Minimising
t(b, f) * r(b) is minimising T(b, f), because N(b_max) is one constant factor.

Everything here is a pure function of a `Profile` and a mapping {b: r(b)}: no I/O,
no numpy, no torch, so `undercap select` starts instantly and the logic is tested
against a brute force (tests/test_select.py).

Tie-breaking (all methods): equal scores prefer the larger batch size, then the
higher frequency; deterministic, and a larger batch means fewer optimizer steps.

Beyond the paper (docs/concepts/method.md, safety.md): each precision of a profile is
a table t(b, f), P(b, f) of its own, the choice made in one or, with `precision="auto"`,
in each (r(b) is the same in all, measured: docs/results); other functions here take
one precision. Feasible means peak plus a safety margin within the limit: each row's
own (profile/margin.py; none in older profiles), or `margin_w` for every row
(`--power-margin-w`; 0 restores the paper's test peak <= limit).
"""

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from undercap.artifacts import Profile, ProfileRow
from undercap.defaults import PRECISIONS
from undercap.errors import ArtifactError, InfeasibleError, UndercapError

OURS = "ours"
ORACLE = "oracle"
BASELINE1 = "baseline1"
BASELINE2 = "baseline2"


@dataclass(frozen=True)
class Choice:
    """One selected configuration and what the profile predicts for it.

    relative_samples is r(b) = N(b) / N(b_max) and score = t * r (time-to-accuracy
    in units of N(b_max) samples); both are None for a Baseline 1 choice made
    without efficiency data, since that baseline does not use r. With another
    objective (select/objectives.py) the score is that objective's value.
    """

    method: str
    batch_size: int
    freq_mhz: float
    time_per_sample_s: float
    peak_power_w: float
    relative_samples: Optional[float]
    score: Optional[float]
    power_limit_w: Optional[float]
    mean_power_w: Optional[float] = None  # the profile's mean power: energy = P * t * r
    objective: str = "time"  # what `score` measures (select/objectives.py)
    power_margin_w: Optional[float] = None  # the safety margin its feasibility used
    precision: str = "fp32"  # the arithmetic of the profile rows it was chosen from

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Choice":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# --- input checks -----------------------------------------------------------------
def _real(value: Any) -> bool:
    """A real number (numbers.*, so numpy scalars from analysis code pass too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive(value: Any, what: str, unit: str) -> float:
    if not _real(value):
        raise UndercapError(f"{what} must be a number of {unit}, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise UndercapError(f"{what} must be a positive number of {unit}, got {value}")
    return float(value)


def check_power_limit_w(power_limit_w: Optional[float]) -> Optional[float]:
    """None means no power cap; anything else must be a positive finite number. The
    one check of a cap's value: selection's entry points call it on what they are
    given, and train/cap.FixedCap on what every run is held to."""
    return None if power_limit_w is None else _positive(power_limit_w, "power limit", "watts")


def _by_batch(profile: Profile) -> Dict[int, List[ProfileRow]]:
    """Rows grouped by batch size, each list in ascending frequency. Also validates
    the rows, since a Profile can be built in code without artifacts' checks."""
    if not profile.rows:
        raise ArtifactError(f"profile of {profile.model} has no rows; re-run the profile")
    if len(profile.precisions) > 1:
        raise ArtifactError(
            f"the profile of {profile.model} holds rows in {', '.join(profile.precisions)}: "
            "choose in one precision (--precision), or in each with --precision auto"
        )
    groups: Dict[int, List[ProfileRow]] = {}
    for r in profile.rows:
        values = (r.freq_mhz, r.time_per_sample_s, r.peak_power_w)
        if not all(math.isfinite(v) and v > 0 for v in values) or r.batch_size <= 0:
            raise ArtifactError(
                f"profile of {profile.model}: row b={r.batch_size}, f={r.freq_mhz} has a "
                "non-positive or non-finite value; re-run the profile"
            )
        groups.setdefault(r.batch_size, []).append(r)
    for b, rows in groups.items():
        rows.sort(key=lambda r: r.freq_mhz)
        if len({r.freq_mhz for r in rows}) != len(rows):
            raise ArtifactError(
                f"profile of {profile.model} has duplicate rows for batch size {b}; "
                "re-run the profile"
            )
    return groups


def _check_relative(relative: Mapping[int, float], what: str) -> Dict[int, float]:
    out: Dict[int, float] = {}
    for b, r in relative.items():
        ok_b = isinstance(b, numbers.Integral) and not isinstance(b, bool) and b > 0
        if not (ok_b and _real(r) and math.isfinite(r) and r > 0):
            raise ArtifactError(f"{what}: r({b!r}) = {r!r}; expected a positive finite ratio")
        out[int(b)] = float(r)
    return out


def _check_margin(margin_w: Optional[float]) -> Optional[float]:
    """None: each row's measured margin; else a non-negative finite number of watts."""
    if margin_w is None:
        return None
    if not _real(margin_w) or not math.isfinite(margin_w) or margin_w < 0:
        raise UndercapError(
            f"power margin must be a non-negative number of watts, got {margin_w!r}"
        )
    return float(margin_w)


def margin_of(row: ProfileRow, margin_w: Optional[float] = None) -> float:
    """The safety margin added to `row`'s peak: `margin_w`, else the row's own (module
    docstring), else 0 (a profile made before margins were measured)."""
    if margin_w is not None:
        return _check_margin(margin_w)  # type: ignore[return-value]
    return row.peak_margin_w or 0.0


def _within(row: ProfileRow, limit: Optional[float], margin_w: Optional[float] = None) -> bool:
    return limit is None or row.peak_power_w + margin_of(row, margin_w) <= limit


def _choice(
    method: str,
    row: ProfileRow,
    r: Optional[float],
    limit: Optional[float],
    margin_w: Optional[float] = None,
) -> Choice:
    return Choice(
        method=method,
        batch_size=row.batch_size,
        freq_mhz=row.freq_mhz,
        time_per_sample_s=row.time_per_sample_s,
        peak_power_w=row.peak_power_w,
        relative_samples=r,
        score=None if r is None else row.time_per_sample_s * r,
        power_limit_w=limit,
        mean_power_w=row.mean_power_w,
        power_margin_w=margin_of(row, margin_w),
        precision=row.precision,
    )


def _best(choices: Iterable[Choice]) -> Optional[Choice]:
    """Lowest score; ties prefer larger b, then higher f, then fp32 (module docstring)."""
    order = {p: i for i, p in enumerate(PRECISIONS)}
    return min(
        choices,
        key=lambda c: (c.score, -c.batch_size, -c.freq_mhz, order.get(c.precision, 9)),
        default=None,
    )


AUTO = "auto"


def profiles_in(profile: Profile, precision: Optional[str]) -> List[Profile]:
    """The single-precision profiles a choice is made among: `precision`'s rows;
    "auto": every precision's; None: the profile's one precision, fp32 where it has
    several."""
    if precision == AUTO:
        return [profile.in_precision(p) for p in profile.precisions]
    if precision is None:
        precision = profile.precisions[0] if len(profile.precisions) == 1 else "fp32"
    if precision not in PRECISIONS:
        raise UndercapError(f"unknown precision {precision!r}; use {', '.join(PRECISIONS)} or auto")
    return [profile.in_precision(precision)]


def best_over_precisions(
    profile: Profile, precision: Optional[str], choose_in: Callable[[Profile], Choice]
) -> Choice:
    """`choose_in` in each single-precision profile (profiles_in), the best kept; where
    none is feasible, the error of the precision that comes closest."""
    choices, errors = [], []
    for sub in profiles_in(profile, precision):
        try:
            choices.append(choose_in(sub))
        except InfeasibleError as e:
            errors.append((lowest_feasible_power_w(sub), e))
    best = _best(choices)
    if best is not None:
        return best
    raise min(errors, key=lambda x: x[0])[1]


# --- Algorithm 1 (Sec. 4.3) -------------------------------------------------------
def lowest_feasible_power_w(
    profile: Profile,
    batch_sizes: Optional[Iterable[int]] = None,
    *,
    margin_w: Optional[float] = None,
) -> float:
    """The smallest peak power plus margin over the profile's rows (optionally only
    these batch sizes): the lowest limit under which any configuration is feasible."""
    wanted = None if batch_sizes is None else set(batch_sizes)
    peaks = [
        r.peak_power_w + margin_of(r, margin_w)
        for p in profile.precisions
        for rows in _by_batch(profile.in_precision(p)).values()
        for r in rows
        if wanted is None or r.batch_size in wanted
    ]
    if not peaks:
        raise ArtifactError(f"profile of {profile.model} has no rows for batch sizes {wanted}")
    return min(peaks)


def per_batch(
    profile: Profile,
    relative: Mapping[int, float],
    power_limit_w: Optional[float],
    *,
    method: str = OURS,
    margin_w: Optional[float] = None,
) -> Tuple[Choice, ...]:
    """Algorithm 1's inner loop: for every batch size with both profile rows and an
    r(b), the highest frequency whose peak power plus margin is within the limit
    (Sec. 4.3: a higher clock is faster, so it is the best feasible one). Batch sizes
    with no feasible row are left out; see `excluded_batch_sizes` for why."""
    limit = check_power_limit_w(power_limit_w)
    rel = _check_relative(relative, "efficiency")
    margin_w = _check_margin(margin_w)
    out = []
    for b, rows in sorted(_by_batch(profile).items()):
        feasible = [row for row in rows if _within(row, limit, margin_w)]
        if b in rel and feasible:
            out.append(_choice(method, feasible[-1], rel[b], limit, margin_w))
    return tuple(out)


def select_ours(
    profile: Profile,
    relative: Mapping[int, float],
    power_limit_w: Optional[float],
    *,
    margin_w: Optional[float] = None,
    precision: Optional[str] = None,
) -> Choice:
    """The paper's Algorithm 1 with r(b) estimated on a proxy dataset (Sec. 4.3), in
    `precision` (profiles_in: "auto" chooses among the profile's precisions too)."""
    return best_over_precisions(
        profile, precision, lambda p: _select(p, relative, power_limit_w, OURS, margin_w)
    )


def oracle(
    profile: Profile,
    relative_target: Mapping[int, float],
    power_limit_w: Optional[float],
    *,
    margin_w: Optional[float] = None,
    precision: Optional[str] = None,
) -> Choice:
    """The fastest configuration (Sec. 5): Algorithm 1 with the true r(b) measured
    by training on the target data itself; an upper bound, not a usable method."""
    return best_over_precisions(
        profile, precision, lambda p: _select(p, relative_target, power_limit_w, ORACLE, margin_w)
    )


def _select(
    profile: Profile,
    relative: Mapping[int, float],
    power_limit_w: Optional[float],
    method: str,
    margin_w: Optional[float] = None,
) -> Choice:
    best = _best(per_batch(profile, relative, power_limit_w, method=method, margin_w=margin_w))
    if best is not None:
        return best
    common = set(profile.batch_sizes) & set(relative)
    if not common:
        raise ArtifactError(
            f"no batch size has both profile rows {list(profile.batch_sizes)} and an "
            f"efficiency estimate {sorted(relative)}; estimate efficiency for the "
            "profiled batch sizes"
        )
    lowest = min(
        (r for r in profile.rows if r.batch_size in common),
        key=lambda r: (r.peak_power_w + margin_of(r, margin_w), -r.batch_size),
    )
    m = margin_of(lowest, margin_w)
    raise InfeasibleError(
        f"no configuration of {profile.model} stays under {power_limit_w:g} W: the lowest "
        f"feasible power is {lowest.peak_power_w + m:.2f} W (batch size {lowest.batch_size} "
        f"at {lowest.freq_mhz:g} MHz"
        + (f": peak {lowest.peak_power_w:.2f} W + margin {m:.2f} W" if m else "")
        + "); raise the power limit to at least that"
    )


def excluded_batch_sizes(
    profile: Profile,
    relative: Mapping[int, float],
    power_limit_w: Optional[float],
    *,
    margin_w: Optional[float] = None,
) -> Dict[int, str]:
    """Why each batch size seen in the profile or in r is not a candidate of
    Algorithm 1 (one short reason each), so exclusions are visible to the user."""
    limit = check_power_limit_w(power_limit_w)
    margin_w = _check_margin(margin_w)
    groups = _by_batch(profile)
    out: Dict[int, str] = {}
    for b in sorted(set(groups) | set(relative) | set(profile.unfit_batch_sizes)):
        if b not in groups:
            unfit = b in profile.unfit_batch_sizes
            out[b] = "does not fit in device memory" if unfit else "not in the profile"
        elif b not in relative:
            out[b] = "no efficiency estimate r(b) (never reached the target, or not run)"
        elif not any(_within(r, limit, margin_w) for r in groups[b]):
            rows = groups[b]
            lowest = min(r.peak_power_w + margin_of(r, margin_w) for r in rows)
            with_margin = " (peak + margin)" if any(margin_of(r, margin_w) for r in rows) else ""
            out[b] = f"needs at least {lowest:.2f} W{with_margin}, above the {limit:g} W limit"
    return out


def expected_speedup(faster: Choice, slower: Choice) -> float:
    """How many times shorter `faster`'s predicted time-to-accuracy is than
    `slower`'s: slower.score / faster.score (both need r(b))."""
    if faster.score is None or slower.score is None:
        raise UndercapError(
            f"cannot compare {faster.method} with {slower.method}: a score needs r(b) "
            "for its batch size"
        )
    return slower.score / faster.score
