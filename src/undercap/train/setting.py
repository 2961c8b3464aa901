"""What a loop of your own runs at (train/api.py's capped(), train/callbacks.py, fleet
nodes): its TrainSpec (train/spec.py, without a model: the model is the loop's), from
a selection, else the objective's choice (Algorithm 1 for time) on a profile and r(b)
(one proxy's, or the median of several), else a batch size and clock as given; and
the follower that re-selects when the cap changes during training. ("Choice" is
Algorithm 1's result, select.core.Choice; the TrainSpec is what a loop is told.)"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Union

from undercap import defaults
from undercap.artifacts.selection import Selection, load_selection
from undercap.errors import UndercapError
from undercap.train.cap import NO_CAP, Cap, changes, fixed_limit_w
from undercap.train.follow import CapFollower
from undercap.train.schedule import Reselector
from undercap.train.spec import TrainSpec

_TIME: Mapping[str, Any] = {"objective": "time"}
_NONE4 = (None, None, None, None)


def loop_spec(
    selection: Union[Selection, TrainSpec, str, Path, None],
    *,
    cap: Cap = NO_CAP,
    target_accuracy: Optional[float] = None,
    guard_window_s: float = defaults.GUARD_WINDOW_S,
    batch_size: Optional[int] = None,
    freq_mhz: Optional[float] = None,
    max_batch_size: Optional[int] = None,
    profile: Any = None,
    relative: Optional[Mapping[int, float]] = None,
    proxies: Any = None,
    objective: Mapping[str, Any] = _TIME,
) -> tuple[TrainSpec, Optional[CapFollower]]:
    """What a loop of your own runs at, and for a cap that changes the follower that
    re-selects at every change. The TrainSpec: one made already (a trainer callback's,
    a fleet node's) as it is; else from a selection (its limit where no cap is given),
    else the objective's choice (Algorithm 1 for time) under `cap` on a profile and
    r(b) (one proxy's `relative`, or the median of several `proxies`), else
    `batch_size` and `freq_mhz` as given. The model is the loop's (None);
    `max_batch_size` is the estimate's b_max, which the learning rate is scaled from."""
    if proxies is not None:  # the ensemble rule: Algorithm 1 on the proxies' median r(b)
        relative = median_relative(proxies, relative)
    given = (batch_size, freq_mhz, max_batch_size, target_accuracy)
    spec = choose_spec(selection, cap, given, guard_window_s, profile, relative, objective)
    return spec, follower_for(spec.cap, profile, relative, objective)


def choose_spec(
    selection: Union[Selection, TrainSpec, str, Path, None],
    cap: Cap,
    given: tuple[Optional[int], Optional[float], Optional[int], Optional[float]],
    guard_window_s: float,
    profile: Any,
    relative: Optional[Mapping[int, float]],
    objective: Mapping[str, Any],
) -> TrainSpec:
    """loop_spec's TrainSpec without its follower (a trainer callback's, made before
    capped() makes the follower); `given`: the batch size, clock, b_max and target."""
    batch_size, freq_mhz, max_batch_size, target_accuracy = given
    if isinstance(selection, TrainSpec):
        if cap != NO_CAP or given != _NONE4:
            raise UndercapError(
                "capped(): a TrainSpec states the batch size, clock, cap and target; "
                "give them in it, not as keywords too"
            )
        return selection
    mine = {"model": None, "target_accuracy": target_accuracy, "guard_window_s": guard_window_s}
    if selection is not None:
        sel = selection if isinstance(selection, Selection) else load_selection(selection)
        return replace(TrainSpec.from_selection(sel, cap=None if cap == NO_CAP else cap), **mine)
    if profile is not None and relative is not None:
        from undercap.select import choose, per_batch

        prof, limit_w = as_profile(profile), fixed_limit_w(cap)
        choice = choose(prof, relative, limit_w, **objective)
        ladder = tuple(c.batch_size for c in per_batch(prof, relative, limit_w))
        freq = choice.freq_mhz if prof.clock == "chosen" else None
        return TrainSpec(
            batch_size=choice.batch_size,
            freq_mhz=freq,
            cap=cap,
            max_batch_size=max(relative),
            batch_ladder=ladder,
            **mine,
        )
    if batch_size is None:
        raise UndercapError(
            "capped() needs a selection, or a profile and r(b) (relative=) with a power "
            "limit, or a batch_size"
        )
    return TrainSpec(
        batch_size=batch_size, freq_mhz=freq_mhz, cap=cap, max_batch_size=max_batch_size, **mine
    )


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
