"""What a capped loop runs at (train/api.py, train/callbacks.py), its LoopSetting: from
a selection, else the objective's choice (Algorithm 1 for time) on a profile and r(b)
(one proxy's, or the median of several), else a batch size and clock as given; and
the follower that re-selects when the cap changes during training. ("Choice" is
Algorithm 1's result, select.core.Choice; a setting is what a loop is told.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from undercap.artifacts.selection import Selection, load_selection
from undercap.errors import UndercapError
from undercap.train.cap import Cap, changes, fixed_limit_w
from undercap.train.follow import CapFollower
from undercap.train.schedule import Reselector


@dataclass(frozen=True)
class LoopSetting:
    """The batch size, clock (None: as found), cap and b_max (for the LR) of a loop."""

    batch_size: int
    freq_mhz: Optional[float]
    power_limit_w: Optional[float]
    max_batch_size: Optional[int]
    # read-only clocks: what the guard steps down through over the cap (session.py)
    batch_ladder: tuple[int, ...] = ()


def choose_setting(
    selection: Union[Selection, str, Path, None],
    batch_size: Optional[int],
    freq_mhz: Optional[float],
    power_limit_w: Optional[float],
    profile: Any,
    relative: Optional[Mapping[int, float]],
    objective: Mapping[str, Any],
    max_batch_size: Optional[int] = None,
) -> LoopSetting:
    """From a selection, else the objective's choice (Algorithm 1 for time) on a
    profile and r(b), else given (`max_batch_size`: the estimate's b_max for lr())."""
    if selection is not None:
        sel = selection if isinstance(selection, Selection) else load_selection(selection)
        limit = sel.power_limit_w if power_limit_w is None else power_limit_w
        b_max = sel.training.get("max_batch_size")
        # a read-only selection observed its clock: train at the clocks as found
        return LoopSetting(sel.batch_size, sel.lock_mhz(), limit, b_max, sel.batch_ladder())
    if profile is not None and relative is not None:
        from undercap.select import choose, per_batch

        prof = as_profile(profile)
        choice = choose(prof, relative, power_limit_w, **objective)
        ladder = tuple(c.batch_size for c in per_batch(prof, relative, power_limit_w))
        freq = choice.freq_mhz if prof.clock == "chosen" else None
        return LoopSetting(choice.batch_size, freq, power_limit_w, max(relative), ladder)
    if batch_size is None:
        raise UndercapError(
            "capped() needs a selection, or a profile and r(b) (relative=) with a power "
            "limit, or a batch_size"
        )
    return LoopSetting(batch_size, freq_mhz, power_limit_w, max_batch_size)


def as_profile(profile: Any) -> Any:
    from undercap.artifacts.profile import Profile, load_profile

    return profile if isinstance(profile, Profile) else load_profile(profile)


def follower_for(
    cap: Cap, profile: Any, relative: Any, objective: Mapping[str, Any]
) -> Optional[CapFollower]:
    """A CapFollower for a cap that changes (train/follow.py); None for a fixed one."""
    if not changes(cap):
        return None
    if profile is None or relative is None:
        raise UndercapError("a power schedule needs profile= and relative= to re-select")
    reselector = Reselector(
        as_profile(profile),
        dict(relative),
        objective=objective.get("objective", "time"),
        energy_budget_j=objective.get("energy_budget_j"),
        n_max=objective.get("samples_bmax"),
    )
    return CapFollower(cap, reselector)


def median_relative(proxies: Any, relative: Any) -> dict[int, float]:
    """The median r(b) of several proxies (select/pooling.py); not with `relative`."""
    if relative is not None:
        raise UndercapError("capped(): give relative= (one proxy) or proxies=, not both")
    from undercap.select.pooling import proxies_relative

    return proxies_relative(proxies)


def run_at(
    selection: Union[Selection, str, Path, None],
    given: tuple[Optional[int], Optional[float], Optional[int], Cap],
    profile: Any,
    relative: Optional[Mapping[int, float]],
    proxies: Any,
    obj: dict[str, Any],
) -> tuple[LoopSetting, Optional[CapFollower]]:
    """What capped() runs at (choose_setting) and, for a cap that changes, the follower
    that re-selects; `given`: the batch size, clock, b_max and cap passed to it."""
    if proxies is not None:  # the ensemble rule: Algorithm 1 on the proxies' median r(b)
        relative = median_relative(proxies, relative)
    batch_size, freq_mhz, max_batch_size, limit = given
    setting = choose_setting(
        selection,
        batch_size,
        freq_mhz,
        fixed_limit_w(limit),
        profile,
        relative,
        obj,
        max_batch_size,
    )
    return setting, follower_for(limit, profile, relative, obj)
