"""`undercap run`: the method end to end in one command.

profile (or reuse) the device -> estimate (or reuse) r(b) on the proxy -> select
(Algorithm 1) -> train on the target on the device at the chosen (b, f) under the
power limit -> one results folder:

    profile.json     the (b, f) lookup table used
    efficiency.json  r(b) on the proxy used (several proxies: undercap.efficiency-set/1)
    selection.json   the choice (undercap.selection/1), every candidate, exclusions,
                     baselines, and how to train: `undercap train --from-selection`
                     repeats the run from it
    train.json       the training result (time to accuracy, energy, power, guard events)
    evals.csv        one row per evaluation: samples, device time, energy, accuracy, power
    summary.md       a short human summary (also printed)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from undercap import defaults
from undercap.artifacts.cache import Cache
from undercap.artifacts.efficiency import Efficiency, EfficiencySet, save_efficiency_set
from undercap.artifacts.io import write_atomic
from undercap.artifacts.profile import Profile, save_profile
from undercap.artifacts.selection import Selection, save_selection
from undercap.artifacts.train_result import TrainResult, save_train_result
from undercap.data.spec import DataSpec
from undercap.errors import InfeasibleError, UndercapError
from undercap.recipes.common import (
    Log,
    TrainingSetup,
    estimate_efficiency,
    stderr_log,
    with_pretrained,
)
from undercap.recipes.ensemble import check_several, ensemble_selection, load_pooled
from undercap.recipes.gns_check import GnsAsk, apply_check, cross_check
from undercap.recipes.profiling import (
    ProfileAsk,
    check_feasible,
    complete,
    profile_stage,
    with_cost,
)
from undercap.recipes.race import RaceAsk, race_plan, race_summary, race_then_train
from undercap.recipes.run_train import SelectionTraining
from undercap.recipes.selection import build_selection, training_of
from undercap.select import lowest_feasible_power_w
from undercap.select.pooling import as_set, pooled_efficiency, several
from undercap.train.cap import Cap, FixedCap, cap_from, changes, fixed_limit_w
from undercap.train.schedule import LiveSource


@dataclass(frozen=True)
class RunConfig:
    """What `undercap run` does, as one value: estimate (or reuse) r(b) on the proxy,
    profile (or reuse) the device, select (b, f) and train on the target under the cap.

    Args:
        device: Device name, as `--device`: `sim:jetson-nano`, `jetson`, `nvml:0`, ...
        model: Built-in model name or your factory (`path/to/file.py:build`).
        proxy: Dataset r(b) is estimated on; unused when `efficiency` is given.
        target: Dataset trained on, on the device.
        power_limit_w: The cap in W; None: no cap (or the cap comes from `power_schedule`
            or `power_source`, or is given as `cap`).
        setup: What every training run shares: batch sizes, budget, learning rate.
        target_accuracy: Test accuracy on the target at which device training stops.
        proxy_accuracy: Target accuracy of the proxy estimate; None: `target_accuracy`.
        proxy_fraction: Or the proxy target as a fraction of b_max's best proxy accuracy.
        estimate_seeds: Seeds of the r(b) estimate runs.
        seed: Seed of the device training run.
        efficiency: Path of an efficiency file (`undercap estimate`) to reuse.
        proxies: Several proxies: r(b) on each, pooled by the ensemble rule (the median
            r(b)); replaces `proxy`.
        efficiencies: Several efficiency files (or sets) to pool; replaces `efficiency`.
        profile: Path of a profile (`undercap profile`) to reuse instead of profiling.
        pretrain_source: Dataset to pre-train on first; every run starts from its weights.
        pretrain_samples: Pre-training budget in samples; None: 5 epochs.
        full_profile: Profile every (b, f) instead of the efficient sweep for the cap.
        cache_dir: Cache of profiles, estimates and runs; None: `OUT_DIR/cache`.
        device_options: Keyword arguments of `open_device` (`read_only`, `sysfs_root`,
            `allow_clock_control`).
        objective: What to minimise under the cap: `"time"`, `"energy"` or `"edp"`
            (energy x time).
        energy_budget_j: A battery: the fastest configuration whose predicted energy to
            the target fits in this many joules.
        power_schedule: CSV of `time_s,power_limit_w` rows: the cap changes during
            training and (b, f) is re-selected at every change.
        power_source: Or a file another program rewrites with the current cap in W.
        poll_s: How often `power_source` is read, in seconds.
        rule: With one proxy, what picks the trained (b, f): `"paper"` (Algorithm 1),
            `"spread"` or `"gns"`; several proxies always use the ensemble rule.
        gns_check: Measure the gradient noise scale on the target before training and
            show it beside r(b) (one proxy only).
        gns_budget: That probe's device time at most, as a fraction of the predicted
            training time; skipped when it does not fit.
        power_margin_w: Safety margin added to every profiled peak; None: each
            configuration's measured margin, 0: none (the paper's test).
        race: With several proxies, race the candidates they disagree on, on the target,
            before training (off by default: it measured no better than the median).
        race_fraction: Each race candidate's device time, as a fraction of the
            favourite's predicted training time.
        online: With several proxies, re-select (b, f) at every evaluation from the
            target's own curve (off by default: it did not beat the median on the matrix).
        cap: The cap as one value (`FixedCap`, a schedule or a live
            source), instead of `power_limit_w` / `power_schedule` / `power_source`;
            built from those when not given.
    """

    device: str
    model: str
    proxy: Optional[DataSpec]
    target: DataSpec
    power_limit_w: Optional[float]
    setup: TrainingSetup
    target_accuracy: float
    proxy_accuracy: Optional[float] = None
    proxy_fraction: Optional[float] = None
    estimate_seeds: tuple[int, ...] = (0, 1, 2)
    seed: int = 0
    efficiency: Optional[str] = None
    proxies: tuple[DataSpec, ...] = ()
    efficiencies: tuple[str, ...] = ()
    profile: Optional[str] = None
    pretrain_source: Optional[DataSpec] = None
    pretrain_samples: Optional[int] = None
    full_profile: bool = False
    cache_dir: Optional[str] = None
    device_options: dict[str, Any] = field(default_factory=dict)
    objective: str = "time"
    energy_budget_j: Optional[float] = None
    power_schedule: Optional[str] = None
    power_source: Optional[str] = None
    poll_s: float = defaults.POWER_SOURCE_POLL_S
    rule: str = defaults.SELECTION_RULE
    gns_check: bool = defaults.GNS_CHECK
    gns_budget: float = defaults.GNS_BUDGET_FRACTION
    power_margin_w: Optional[float] = None
    race: bool = defaults.RACE
    race_fraction: float = defaults.RACE_FRACTION
    cap: Optional[Cap] = None
    online: bool = defaults.ONLINE

    def __post_init__(self) -> None:
        """The one cap value, checked here once: from the three fields, or given."""
        given = (self.power_limit_w, self.power_schedule, self.power_source)
        if self.cap is None:
            cap = cap_from(self.power_limit_w, self.power_schedule, self.power_source, self.poll_s)
            object.__setattr__(self, "cap", cap)
        elif any(x is not None for x in given):
            raise UndercapError("give cap= or power_limit_w / power_schedule / power_source")


@dataclass(frozen=True)
class RunResult:
    """What `run` produced; the same is in the results folder."""

    profile: Profile
    efficiency: Efficiency
    selection: Selection
    result: TrainResult
    summary: str


def run(
    cfg: RunConfig, out_dir: Union[str, Path], *, progress: bool = True, log: Log = stderr_log
) -> RunResult:
    """Do everything and write the results folder."""
    from undercap.report.text import run_summary

    out = Path(out_dir)
    cache = Cache(cfg.cache_dir or out / "cache")
    cap: Cap = cfg.cap  # type: ignore[assignment]  (__post_init__ built it)
    # Device and profile first (the smallest batch size's stage, recipes/profiling.py):
    # an unknown device or an infeasible limit fails before the (longer) estimate.
    ask = _profile_ask(cfg, cap)
    profile = profile_stage(ask, cache, progress, log)
    limit = _first_limit(cap, profile, cfg.power_margin_w)
    setup = with_pretrained(
        cfg.setup,
        cfg.pretrain_source,
        max_samples=cfg.pretrain_samples,
        cache=cache,
        progress=progress,
        log=log,
    )
    eff = _efficiency(cfg, setup, cache, progress, log)  # several proxies: pooled
    profile = complete(ask, profile, eff.relative, cache, progress, log)  # stage 2, with r(b)
    training = {**training_of(eff), **_training(cfg, setup)}
    selection = _selection(cfg, setup, profile, eff, limit, cache, training)
    # A folder holding another run's training is refused before any file in it changes.
    SelectionTraining.for_run(cfg, cap, setup.torch_device, profile, eff).check(selection, out)
    save_efficiency_set(out / "efficiency.json", as_set(eff))  # one proxy: efficiency/1
    save_profile(out / "profile.json", profile)
    save_selection(out / "selection.json", selection)
    log(
        f"selected batch size {selection.batch_size} at {selection.freq_mhz:g} MHz "
        f"(limit {'none' if limit is None else f'{limit:g} W'}); training on {cfg.target.label}"
    )
    result = _train(cfg, cap, setup, profile, eff, limit, selection, out, progress, log)
    save_train_result(out / "train.json", result)
    selection = with_cost(selection, profile, result)  # profiling's share of the training
    save_selection(out / "selection.json", selection)
    if result.segments:
        _plot_schedule(result, cap, out / "schedule.png", log)
    text = run_summary(cfg, profile, eff, selection, result) + race_summary(result)
    write_atomic(out / "summary.md", text)
    return RunResult(profile, eff, selection, result, text)


def _train(
    cfg: RunConfig,
    cap: Cap,
    setup: TrainingSetup,
    profile: Profile,
    eff: Efficiency,
    limit: Optional[float],
    selection: Selection,
    out: Path,
    progress: bool,
    log: Log,
) -> TrainResult:
    """Train the selection on the target under the cap (re-selecting where it changes),
    after the race where one is asked for and needed (recipes/race.py)."""
    train = SelectionTraining.for_run(cfg, cap, setup.torch_device, profile, eff)
    race = RaceAsk(cfg.race, cfg.race_fraction, cfg.power_margin_w, changes(cap))
    plan, why = race_plan(race, profile, eff, limit, selection)
    if why:
        log(why)
    if plan is not None and plan.needed:
        return race_then_train(cfg.target_accuracy, selection, plan, out, progress, log, train)
    return train(selection, out, progress, None)


def _selection(
    cfg: RunConfig,
    setup: TrainingSetup,
    profile: Profile,
    eff: Efficiency,
    limit: Optional[float],
    cache: Cache,
    training: dict[str, Any],
) -> Selection:
    """The rule's choice: the ensemble rule with several proxies (recipes/ensemble.py;
    the noise-scale check compares one proxy's r(b)), else Algorithm 1 with the check."""
    if several(eff):
        return ensemble_selection(
            profile, eff, limit, training=training, margin_w=cfg.power_margin_w
        )
    check = cross_check(_gns_ask(cfg, setup), profile, eff, limit, cache)  # r(b) vs noise scale
    selection = build_selection(
        profile,
        eff,
        limit,
        training=training,
        objective=cfg.objective,
        energy_budget_j=cfg.energy_budget_j,
        margin_w=cfg.power_margin_w,
    )
    return apply_check(selection, check)  # the rule's choice (paper: unchanged)


def _gns_ask(cfg: RunConfig, setup: TrainingSetup) -> GnsAsk:
    """What the noise-scale cross-check needs of this run."""
    return GnsAsk(
        rule=cfg.rule,
        on=cfg.gns_check,
        budget_fraction=cfg.gns_budget,
        objective=cfg.objective,
        margin_w=cfg.power_margin_w,
        device=cfg.device,
        device_options=cfg.device_options,
        model=cfg.model,
        target=cfg.target,
        proxy=cfg.proxy,
        seed=cfg.seed,
        pretrained=setup.pretrained,
        loss=setup.loss,
        metric=setup.metric,
    )


def _plot_schedule(result: TrainResult, cap: Cap, path: Path, log: Log) -> None:
    """schedule.png: the cap, the power drawn and the configuration over time."""
    from undercap.errors import MissingExtraError
    from undercap.report.schedule import plot_schedule

    sim = " (simulated device)" if result.simulated else ""
    try:
        plot_schedule(
            result.segments,
            path,
            title=f"{result.model} on {result.device.get('name')}{sim}: {result.schedule}",
            cap=cap if hasattr(cap, "times_s") else None,
        )
    except MissingExtraError as e:
        log(f"note: no schedule figure ({e})")


def _training(cfg: RunConfig, setup: TrainingSetup) -> dict[str, Any]:
    """The selection's training block: what `train --from-selection` needs to repeat
    this run (besides the data and model, which the user names again)."""
    return {
        "max_batch_size": max(setup.batch_sizes),
        "base_lr": setup.lr,
        "pretrained": setup.pretrained,
        "max_samples": setup.max_samples,
        "eval_every_samples": setup.eval_every_samples,
        "eval_max_samples": setup.eval_max_samples,
        "eval_schedule": setup.eval_schedule,
        "loss": setup.loss,
        "metric": setup.metric,
        **setup.recipe_paths,  # the user's optimizer, LR schedule, training step
        "deterministic": setup.deterministic,
        "target_accuracy": cfg.target_accuracy,
        "seed": cfg.seed,
        "data": cfg.target.key(),
        "model": cfg.model,
    }


def _profile_ask(cfg: RunConfig, cap: Cap) -> ProfileAsk:
    """What to profile: the efficient sweep for a fixed limit; every (b, f) for a cap
    that changes (the efficient sweep covers one limit) or when asked (--full-profile)."""
    return ProfileAsk(
        device=cfg.device,
        device_options=cfg.device_options,
        seed=cfg.seed,
        model=cfg.model,
        target=cfg.target,
        batch_sizes=tuple(cfg.setup.batch_sizes),
        given=cfg.profile,
        efficient_for_w=None if cfg.full_profile else fixed_limit_w(cap),
        margin_w=cfg.power_margin_w,
    )


def _first_limit(cap: Cap, profile: Profile, margin_w: Optional[float]) -> Optional[float]:
    """The limit the selection is made for: a fixed cap's, or the first of a schedule's
    at which some configuration can run. Fails early when none ever can."""
    if isinstance(cap, FixedCap):
        check_feasible(profile, [cap.limit_w], margin_w)
        return cap.limit_w
    lowest = lowest_feasible_power_w(profile, margin_w=margin_w)
    if isinstance(cap, LiveSource):  # what it says now; training waits if too little
        now = cap.lowest_w
        return now if now is None or now >= lowest else None
    runnable = [c for c in cap.limits_w if c is None or c >= lowest]  # type: ignore[attr-defined]
    if not runnable:
        raise InfeasibleError(
            f"no cap of {cap.source} lets {profile.model} run: the lowest feasible "
            f"power is {lowest:.2f} W"
        )
    return runnable[0]


def _efficiency(
    cfg: RunConfig, setup: TrainingSetup, cache: Cache, progress: bool, log: Log
) -> Efficiency:
    """r(b) on the proxy; several proxies pooled (recipes/ensemble.py), and checked
    before any estimate runs."""
    sources = max(len(cfg.proxies), len(cfg.efficiencies))
    check_several(sources, cfg.rule, cfg.objective)
    paths = cfg.efficiencies or ((cfg.efficiency,) if cfg.efficiency else ())
    if paths:
        eff = load_pooled(paths, cfg.model)
        check_several(sources, cfg.rule, cfg.objective, eff)  # one file may hold several
        log(f"reusing r(b) from {', '.join(paths)} ({eff.dataset})")
        return eff
    specs = cfg.proxies or ((cfg.proxy,) if cfg.proxy is not None else ())
    if not specs:
        raise UndercapError("give --proxy SPEC (to estimate r(b)) or --efficiency FILE")
    acc = cfg.proxy_accuracy
    if acc is None and cfg.proxy_fraction is None:
        acc = cfg.target_accuracy
    effs = [
        estimate_efficiency(
            setup,
            spec,
            seeds=cfg.estimate_seeds,
            target_accuracy=acc,
            target_fraction=None if acc is not None else cfg.proxy_fraction,
            cache=cache,
            role="proxy",
            progress=progress,
            log=log,
        )
        for spec in specs
    ]
    return pooled_efficiency(EfficiencySet.of(effs))
