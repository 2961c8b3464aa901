"""How `undercap run` profiles: in two stages around the efficiency estimate, so that
an infeasible limit fails before any long estimate and the efficient sweep can still
skip batch sizes that cannot win once r(b) is known (profile/sweep.py, point 3).

1. Before the estimate: the smallest batch size's highest feasible clock, the first
   step of the efficient sweep. At every clock the smallest batch draws the least
   power (paper Sec. 4.1), so when it has no feasible clock nothing has, and `run`
   stops there with the lowest feasible power (check_feasible).
2. After the estimate: the rest of the efficient sweep with r(b), reusing the rows of
   stage 1 (not measured again; their cost is carried over).

A full sweep (--full-profile, a changing cap) or a profile given with --profile is
one stage. `profiling_cost` sets the profile's total cost against the training that
followed, for the run's summary and selection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from undercap.artifacts.cache import Cache
from undercap.artifacts.profile import Profile
from undercap.errors import InfeasibleError
from undercap.recipes.common import Log, reuse_or_profile
from undercap.select import lowest_feasible_power_w
from undercap.train.cap import Cap, FixedCap, LiveSource


@dataclass(frozen=True)
class ProfileAsk:
    """What `run` profiles for `cfg`: its device (by name, opened for each
    stage), its model at the shape it trains on for the target, its batch sizes, and the
    sweep: a profile given by path, the efficient sweep for one limit (`efficient_for_w`),
    or every (b, f) (None: a full profile was asked for, or the cap changes)."""

    cfg: Any  # a RunConfig (recipes/run.py imports this module)
    efficient_for_w: Optional[float] = None

    @property
    def staged(self) -> bool:
        """Whether it profiles in two stages: an efficient sweep it measures itself."""
        return self.cfg.profile is None and self.efficient_for_w is not None


def profile_stage(
    ask: ProfileAsk,
    cache: Cache,
    progress: bool,
    log: Log,
    *,
    relative: Optional[Mapping[int, float]] = None,
    prior: Optional[Profile] = None,
) -> Profile:
    """Stage 1 (no `prior`: the smallest batch size only, when staged) or stage 2
    (`prior` from stage 1 and r(b)); unstaged: the whole profile at once."""
    from undercap.devices import open_device

    cfg = ask.cfg
    batch_sizes = tuple(cfg.setup.batch_sizes)
    if ask.staged and prior is None:
        batch_sizes = (min(batch_sizes),)  # is the limit feasible at all?
    with open_device(cfg.device, seed=cfg.seed, **cfg.device_options) as device:
        precisions = device.precisions() if cfg.precision == "auto" else (cfg.precision,)
        return reuse_or_profile(
            device,
            cfg.model,
            cfg.target,
            batch_sizes,
            given=cfg.profile,
            cache=cache,
            efficient_for_w=ask.efficient_for_w,
            progress=progress,
            log=log,
            relative=relative,
            margin_w=cfg.power_margin_w,
            prior=prior,
            precisions=precisions,
        )


def complete(
    ask: ProfileAsk,
    first: Profile,
    relative: Mapping[int, float],
    cache: Cache,
    progress: bool,
    log: Log,
) -> Profile:
    """Stage 2 after stage 1 `first` (unstaged: `first` is already the profile)."""
    if not ask.staged or first.mode == "full":
        return first
    return profile_stage(ask, cache, progress, log, relative=relative, prior=first)


def check_feasible(
    profile: Profile, limits: Iterable[Optional[float]], margin_w: Optional[float] = None
) -> None:
    """Fail early (before any estimate or training) on a limit no configuration of the
    profiled model meets (peak plus margin), naming the lowest feasible power."""
    lowest = lowest_feasible_power_w(profile, margin_w=margin_w)
    for lim in limits:
        if lim is not None and lim < lowest:
            raise InfeasibleError(
                f"no configuration of {profile.model} on {profile.device.get('name')} stays "
                f"under {lim:g} W: the lowest feasible power is {lowest:.2f} W; raise the "
                "power limit to at least that"
            )


def selection_limit(cap: Cap, profile: Profile, margin_w: Optional[float]) -> Optional[float]:
    """The limit the selection is made for, read from the cap (Algorithm 1's
    feasibility test needs a number): a fixed cap's, or the first of a schedule's at
    which some configuration can run, or what a live source says now (None when that
    is too little: training then waits for power). Fails early when none ever can."""
    if isinstance(cap, FixedCap):
        check_feasible(profile, [cap.limit_w], margin_w)
        return cap.limit_w
    lowest = lowest_feasible_power_w(profile, margin_w=margin_w)
    if isinstance(cap, LiveSource):
        now = cap.lowest_w
        return now if now is None or now >= lowest else None
    runnable = [c for c in cap.limits_w if c is None or c >= lowest]  # type: ignore[attr-defined]
    if not runnable:
        raise InfeasibleError(
            f"no cap of {cap.source} lets {profile.model} run: the lowest feasible "
            f"power is {lowest:.2f} W"
        )
    return runnable[0]


def profiling_cost(profile: Profile, result: Any) -> dict[str, Any]:
    """The profile's cost and its share of the training that followed (device time:
    the training's own, to the target or the end of its budget)."""
    cost = profile.cost
    train_s = result.time_to_accuracy_s or result.train_time_s
    dev, energy = cost.get("device_time_s"), cost.get("energy_j")
    return {
        "device_time_s": dev,
        "energy_j": energy,
        "configurations": cost.get("configurations"),
        "steps": cost.get("steps"),
        "training_time_s": train_s,
        "training_energy_j": result.energy_j,
        "fraction_of_training_time": dev / train_s if dev is not None and train_s else None,
        "fraction_of_training_energy": (
            energy / result.energy_j if energy is not None and result.energy_j else None
        ),
    }
