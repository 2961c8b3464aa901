"""How `undercap run` profiles: in two stages around the efficiency estimate, so that
an infeasible limit fails before any long estimate and the efficient sweep can still
skip batch sizes that cannot win once r(b) is known (profile/sweep.py, point 3).

1. Before the estimate: the smallest batch size's highest feasible clock, the first
   step of the efficient sweep. At every clock the smallest batch draws the least
   power (paper Sec. 4.1), so when it has no feasible clock nothing has, and `run`
   stops there with the lowest feasible power (recipes/common.check_feasible).
2. After the estimate: the rest of the efficient sweep with r(b), reusing the rows of
   stage 1 (not measured again; their cost is carried over).

A full sweep (--full-profile, a changing cap) or a profile given with --profile is
one stage. `profiling_cost` sets the profile's total cost against the training that
followed, for the run's summary and selection.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from undercap.artifacts.cache import Cache
from undercap.artifacts.profile import Profile
from undercap.recipes.common import Log, reuse_or_profile


def staged(cfg: Any, full: bool) -> bool:
    """Whether `run` profiles in two stages: an efficient sweep it measures itself."""
    return not (cfg.profile or cfg.full_profile or full or cfg.power_limit_w is None)


def profile_stage(
    cfg: Any,
    cache: Cache,
    progress: bool,
    log: Log,
    *,
    full: bool = False,
    relative: Optional[Mapping[int, float]] = None,
    prior: Optional[Profile] = None,
) -> Profile:
    """Stage 1 (no `prior`: the smallest batch size only, when staged) or stage 2
    (`prior` from stage 1 and r(b)); unstaged: the whole profile at once. `cfg` is a
    recipes.run.RunConfig."""
    from undercap.devices import open_device

    batch_sizes = tuple(cfg.setup.batch_sizes)
    if staged(cfg, full) and prior is None:
        batch_sizes = (min(batch_sizes),)  # is the limit feasible at all?
    with open_device(cfg.device, seed=cfg.seed, **cfg.device_options) as device:
        return reuse_or_profile(
            device,
            cfg.model,
            cfg.target,
            batch_sizes,
            given=cfg.profile,
            cache=cache,
            # a changing cap needs every (b, f): the efficient sweep covers one limit
            efficient_for_w=None if cfg.full_profile or full else cfg.power_limit_w,
            progress=progress,
            log=log,
            relative=relative,
            margin_w=getattr(cfg, "power_margin_w", None),
            prior=prior,
        )


def complete(
    cfg: Any, first: Profile, relative: Mapping[int, float], cache: Cache, progress: bool, log: Log
) -> Profile:
    """Stage 2 after stage 1 `first` (unstaged: `first` is already the profile)."""
    if not staged(cfg, full=first.mode == "full"):
        return first
    return profile_stage(cfg, cache, progress, log, relative=relative, prior=first)


def profiling_cost(profile: Profile, result: Any) -> dict[str, Any]:
    """The profile's cost and its share of the training that followed (device time:
    the training's own, to the target or the end of its budget)."""
    cost = profile.cost
    train_s = result.time_to_accuracy_s or result.train_time_s
    dev = cost.get("device_time_s")
    return {
        "device_time_s": dev,
        "energy_j": cost.get("energy_j"),
        "configurations": cost.get("configurations"),
        "steps": cost.get("steps"),
        "training_time_s": train_s,
        "training_energy_j": result.energy_j,
        "fraction_of_training_time": dev / train_s if dev is not None and train_s else None,
        "fraction_of_training_energy": (
            cost.get("energy_j") / result.energy_j
            if cost.get("energy_j") is not None and result.energy_j
            else None
        ),
    }


def with_cost(selection: Any, profile: Profile, result: Any) -> Any:
    """The selection with `profiling_cost` in its extra block."""
    extra = {**selection.extra, "profiling_cost": profiling_cost(profile, result)}
    return dataclasses.replace(selection, extra=extra)
