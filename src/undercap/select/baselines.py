"""The paper's baselines (Sec. 5.1): the safe frequency, Baseline 1 and Baseline 2.

Both run at a fixed "safe" frequency cap per power limit, chosen so that no supported
model exceeds the limit; Baseline 1 takes the largest batch that fits, Baseline 2 the
batch size that is fastest on the proxy at that frequency. Pure functions, like core.
"""

from typing import Iterable, List, Mapping, Optional, Union

from undercap.artifacts.profile import Profile, ProfileRow
from undercap.errors import ArtifactError, InfeasibleError, UndercapError
from undercap.select.core import (
    BASELINE1,
    BASELINE2,
    Choice,
    _best,
    _by_batch,
    _check_margin,
    _check_relative,
    _choice,
    _positive,
    _within,
    check_power_limit_w,
    margin_of,
)


def safe_freq_mhz(
    profiles: Union[Iterable[Profile], Profile],
    power_limit_w: Optional[float],
    *,
    margin_w: Optional[float] = None,
) -> float:
    """The baselines' fixed "safe" frequency cap for a power limit (Sec. 5.1): the
    highest frequency at which no supported model exceeds the limit at any of its
    profiled batch sizes.

    Power rises with frequency (dynamic power ~ C V(f)^2 f), so a frequency f is safe
    for one (model, b) when no row at or below f exceeds the limit and some row at or
    above f is within it. For a full sweep this is "every row at f is within the
    limit"; it also handles the efficient sweep (Sec. 4.1), which skips rows. Within
    the limit: peak plus safety margin (`margin_w`, else each row's measured margin),
    like every selection.
    """
    profs = [profiles] if isinstance(profiles, Profile) else list(profiles)
    if not profs:
        raise UndercapError("safe_freq_mhz needs at least one profile")
    limit = check_power_limit_w(power_limit_w)
    margin_w = _check_margin(margin_w)
    names = {p.device.get("name") for p in profs}
    if len(names) > 1:
        raise UndercapError(f"profiles come from different devices {sorted(map(str, names))}")
    groups = [rows for p in profs for rows in _by_batch(p).values()]
    candidates = sorted({r.freq_mhz for rows in groups for r in rows}, reverse=True)
    if limit is None:  # no cap: nothing to stay under
        return candidates[0]
    for f in candidates:
        if all(_safe_for(rows, f, limit, margin_w) for rows in groups):
            return f
    # The least limit with a safe frequency: the worst (model, b)'s cheapest row.
    need = lambda r: r.peak_power_w + margin_of(r, margin_w)  # noqa: E731
    cheapest = (min(rows, key=need) for rows in groups)
    worst = max(cheapest, key=need)
    model = next(p.model for p in profs if worst in p.rows)
    raise InfeasibleError(
        f"no frequency keeps every model under {limit:g} W: {model} at "
        f"batch size {worst.batch_size} draws {worst.peak_power_w:.2f} W"
        + (f" (+ {margin_of(worst, margin_w):.2f} W margin)" if margin_of(worst, margin_w) else "")
        + f" even at {worst.freq_mhz:g} MHz; raise the power limit to at least that"
    )


def _safe_for(
    rows: List[ProfileRow], f: float, limit: Optional[float], margin_w: Optional[float] = None
) -> bool:
    no_violation_below = all(_within(r, limit, margin_w) for r in rows if r.freq_mhz <= f)
    evidence_above = any(_within(r, limit, margin_w) for r in rows if r.freq_mhz >= f)
    return no_violation_below and evidence_above


def _row_at_or_below(rows: List[ProfileRow], freq_mhz: float) -> Optional[ProfileRow]:
    """The row at the highest profiled frequency <= freq_mhz (rows ascending)."""
    return next((r for r in reversed(rows) if r.freq_mhz <= freq_mhz), None)


def baseline1(
    profile: Profile,
    power_limit_w: Optional[float],
    safe_freq_mhz: float,
    *,
    relative: Optional[Mapping[int, float]] = None,
    margin_w: Optional[float] = None,
) -> Choice:
    """Baseline 1 (Sec. 5.1): the largest batch size that fits in memory (the largest
    in the profile; unfit ones are never profiled) at the fixed safe frequency, or
    the highest profiled frequency below it. Pass `relative` to get its score.

    Raises InfeasibleError if that row exceeds the limit (the given frequency is
    not safe for this model), ArtifactError if nothing was profiled at or below it.
    """
    limit = check_power_limit_w(power_limit_w)
    margin_w = _check_margin(margin_w)
    f_safe = _positive(safe_freq_mhz, "safe frequency", "MHz")
    rel = _check_relative(relative or {}, "efficiency")
    groups = _by_batch(profile)
    b = max(groups)
    row = _row_at_or_below(groups[b], f_safe)
    if row is None:
        raise ArtifactError(
            f"profile of {profile.model} has no row for batch size {b} at or below the "
            f"safe frequency {f_safe:g} MHz; profile with a full sweep"
        )
    if not _within(row, limit, margin_w):
        raise InfeasibleError(
            f"baseline 1 ({profile.model}, batch size {b} at {row.freq_mhz:g} MHz) needs "
            f"{row.peak_power_w + margin_of(row, margin_w):.2f} W (peak + margin), above the "
            f"{limit:g} W limit; the safe frequency {f_safe:g} MHz is not safe for this "
            "model: lower it"
        )
    return _choice(BASELINE1, row, rel.get(b), limit, margin_w)


def baseline2(
    profile: Profile,
    relative_proxy: Mapping[int, float],
    power_limit_w: Optional[float],
    safe_freq_mhz: float,
    *,
    margin_w: Optional[float] = None,
) -> Choice:
    """Baseline 2 (Sec. 5.1): the batch size minimising the proxy's time-to-accuracy
    t(b, f_safe) * r_proxy(b) at the same safe frequency as Baseline 1 (each b at the
    highest profiled frequency <= f_safe). Rows above the limit are not candidates."""
    limit = check_power_limit_w(power_limit_w)
    margin_w = _check_margin(margin_w)
    f_safe = _positive(safe_freq_mhz, "safe frequency", "MHz")
    rel = _check_relative(relative_proxy, "proxy efficiency")
    candidates = []
    for b, rows in sorted(_by_batch(profile).items()):
        row = _row_at_or_below(rows, f_safe)
        if b in rel and row is not None and _within(row, limit, margin_w):
            candidates.append(_choice(BASELINE2, row, rel[b], limit, margin_w))
    best = _best(candidates)
    if best is None:
        cap = "no cap" if limit is None else f"the {limit:g} W limit"
        raise InfeasibleError(
            f"baseline 2 has no candidate for {profile.model}: no batch size with an "
            f"efficiency estimate is profiled at or below {f_safe:g} MHz within {cap}; "
            "use a lower safe frequency or a full profile"
        )
    return best
