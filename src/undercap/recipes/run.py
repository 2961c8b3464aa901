"""`undercap run`: the method end to end in one command.

profile (or reuse) the device -> estimate (or reuse) r(b) on the proxy -> select
(Algorithm 1) -> train on the target on the device at the chosen (b, f) under the
cap -> one results folder:

    profile.json     the (b, f) lookup table used
    efficiency.json  r(b) on the proxy used (several proxies: undercap.efficiency-set/1)
    selection.json   the choice (undercap.selection/1), every candidate, exclusions,
                     baselines, and how to train (its plan): `undercap train
                     --from-selection` repeats the run from it
    train.json       the training result (time to accuracy, energy, power, guard events)
    evals.csv        one row per evaluation: samples, device time, energy, accuracy, power
    summary.md       a short human summary (also printed)

The cap crosses it as one value (train/cap.py): it decides what is profiled, the limit
the selection is made for (the one place here it is read as a number) and, whole, what
the device run holds (train/runner.py).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Union

from undercap import defaults
from undercap.artifacts.cache import Cache
from undercap.artifacts.efficiency import Efficiency, save_efficiency_set
from undercap.artifacts.io import write_atomic
from undercap.artifacts.profile import Profile, save_profile
from undercap.artifacts.selection import Selection, save_selection
from undercap.artifacts.train_result import TrainResult, save_train_result
from undercap.data.spec import DataSpec
from undercap.errors import REMOVED_IN_0_3, ArtifactError, UndercapError, reject_removed
from undercap.recipes.common import Log, TrainingSetup, loaded_splits, stderr_log, with_pretrained
from undercap.recipes.ensemble import ensemble_selection
from undercap.recipes.profiling import (
    ProfileAsk,
    complete,
    profile_stage,
    profiling_cost,
    selection_limit,
)
from undercap.recipes.proxies import check_slices, run_efficiency
from undercap.select.pooling import as_set, several
from undercap.train.cap import Cap, FixedCap, cap_from, changes, fixed_limit_w
from undercap.train.session.follow import Reselector, reselector_for
from undercap.train.spec import RunOptions, TrainSpec

#: RunConfig's spellings of the cap before it was one value (undercap 0.2.0): they still
#: make it, with a DeprecationWarning, until 0.4
_OLD_CAP_KEYWORDS = ("power_limit_w", "power_schedule", "power_source", "poll_s")


def _taking_old_spellings(cls: Any) -> Any:
    """RunConfig(power_limit_w=...) and the other old spellings of the cap: the cap,
    made by cap_from, with a DeprecationWarning; an option 0.3.0 removed: one line."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kw: Any) -> None:
        reject_removed({k: kw.pop(k) for k in list(kw) if k in REMOVED_IN_0_3}, "RunConfig")
        old = {k: kw.pop(k) for k in _OLD_CAP_KEYWORDS if k in kw}
        if old:
            warnings.warn(
                "RunConfig(power_limit_w=, power_schedule=, power_source=, poll_s=) is "
                "deprecated: give cap= (a number of watts, or undercap.train.cap.cap_from)",
                DeprecationWarning,
                stacklevel=2,
            )
            if kw.get("cap") is not None:
                raise UndercapError("give cap= or power_limit_w / power_schedule / power_source")
            kw["cap"] = cap_from(
                old.get("power_limit_w"),
                old.get("power_schedule"),
                old.get("power_source"),
                old.get("poll_s", defaults.POWER_SOURCE_POLL_S),
            )
        init(self, *args, **kw)

    cls.__init__ = __init__
    return cls


@_taking_old_spellings
@dataclass(frozen=True)
class RunConfig:
    """What `undercap run` does, as one value: estimate (or reuse) r(b) on the proxy,
    profile (or reuse) the device, select (b, f) and train on the target under the cap.

    Args:
        device: Device name, as `--device`: `sim:jetson-nano`, `jetson`, `nvml:0`, ...
        model: Built-in model name or your factory (`path/to/file.py:build`).
        proxy: Dataset r(b) is estimated on; unused when `efficiency` is given.
        target: Dataset trained on, on the device.
        cap: The power cap: a number of watts, None (no cap), or one made by
            `undercap.train.cap.cap_from` (a fixed limit, a schedule that changes during
            training, a live source). `power_limit_w=` is its deprecated spelling.
        setup: What every training run shares: batch sizes, budget, learning rate.
        target_accuracy: Test accuracy on the target at which device training stops.
        proxy_accuracy: Target accuracy of the proxy estimate; None: `target_accuracy`.
        proxy_fraction: Or the proxy target as a fraction of b_max's best proxy accuracy.
        estimate_seeds: Seeds of the r(b) estimate runs.
        seed: Seed of the device training run.
        efficiency: Path of an efficiency file (`undercap estimate`) to reuse.
        proxies: Several proxies, pooled by the ensemble rule (the median r(b)); replaces `proxy`.
        efficiencies: Several efficiency files (or sets) to pool; replaces `efficiency`.
        profile: Path of a profile (`undercap profile`) to reuse instead of profiling.
        pretrain_source: Dataset to pre-train on first; every run starts from its weights.
        pretrain_samples: Pre-training budget in samples; None: 5 epochs.
        full_profile: Profile every (b, f) instead of the efficient sweep for the cap.
        cache_dir: Cache of profiles, estimates and runs; None: `OUT_DIR/cache`.
        device_options: Keyword arguments of `open_device` (`read_only`, `sysfs_root`,
            `allow_clock_control`).
        objective: What to minimise under the cap: `"time"`, `"energy"` or `"edp"` (energy x time).
        energy_budget_j: A battery: the fastest configuration whose predicted energy to
            the target fits in this many joules.
        power_margin_w: Safety margin added to every profiled peak; None: each
            configuration's measured margin, 0: none (the paper's test).
        precision: `"fp32"`, `"fp16"`, `"bf16"` (mixed precision), or `"auto"`: profile
            in every precision the device runs, choose (b, f, precision) together.
    """

    device: str
    model: str
    proxy: Optional[DataSpec]
    target: DataSpec
    cap: Any
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
    power_margin_w: Optional[float] = None
    precision: str = defaults.PRECISION

    def __post_init__(self) -> None:
        """A cap given as a number of watts (or None) is a fixed one."""
        if not hasattr(self.cap, "limit_at"):
            object.__setattr__(self, "cap", FixedCap(self.cap))


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
    check_slices(cfg)  # a slice too small for its classes: before the device is touched
    # Profile stage 1 first (recipes/profiling.py): an unknown device or an infeasible
    # limit fails before the (longer) estimate. A cap that changes profiles every (b, f).
    ask = ProfileAsk(cfg, None if cfg.full_profile else fixed_limit_w(cfg.cap))
    profile = profile_stage(ask, cache, progress, log)
    limit = selection_limit(cfg.cap, profile, cfg.power_margin_w)  # what it selects for
    setup = with_pretrained(
        cfg.setup,
        cfg.pretrain_source,
        max_samples=cfg.pretrain_samples,
        cache=cache,
        progress=progress,
        log=log,
    )
    eff = run_efficiency(cfg, setup, cache, progress, log)  # several proxies: pooled
    profile = complete(ask, profile, eff.relative, cache, progress, log)  # stage 2, with r(b)
    selection = _selection(cfg, setup, profile, eff, limit)
    chosen = profile.in_precision(selection.precision)
    device_run = _DeviceRun.of(cfg, setup.torch_device, chosen, eff)
    device_run.check(selection, out)  # another run's training there: refused, nothing written
    save_efficiency_set(out / "efficiency.json", as_set(eff))  # one proxy: efficiency/1
    save_profile(out / "profile.json", profile)
    save_selection(out / "selection.json", selection)
    log(
        f"selected batch size {selection.batch_size} at {selection.freq_mhz:g} MHz "
        f"(limit {'none' if limit is None else f'{limit:g} W'}); training on {cfg.target.label}"
    )
    result = device_run(selection, out, progress)
    save_train_result(out / "train.json", result)
    extra = {**selection.extra, "profiling_cost": profiling_cost(profile, result)}
    selection = replace(selection, extra=extra)  # with profiling's share of the training
    save_selection(out / "selection.json", selection)
    if result.segments:
        _plot_schedule(result, cfg.cap, out / "schedule.png", log)
    text = run_summary(cfg, profile, eff, selection, result)
    write_atomic(out / "summary.md", text)
    return RunResult(profile, eff, selection, result, text)


def _selection(
    cfg: RunConfig, setup: TrainingSetup, profile: Profile, eff: Efficiency, limit: Optional[float]
) -> Selection:
    """Algorithm 1's choice (the ensemble rule's with several proxies,
    recipes/ensemble.py), with the plan of the device run in its `training` block."""
    b_max = max(setup.batch_sizes)  # the block names every field but the batch size
    plan = setup.plan(
        cfg.model, b_max, target_accuracy=cfg.target_accuracy, seed=cfg.seed, data=cfg.target
    )
    return ensemble_selection(  # one proxy: build_selection's
        profile,
        eff,
        limit,
        training=plan.to_dict(),
        objective=cfg.objective,
        energy_budget_j=None if several(eff) else cfg.energy_budget_j,
        margin_w=cfg.power_margin_w,
        precision=cfg.precision,
    )


@dataclass(frozen=True)
class _DeviceRun:
    """How `run` trains a selection on the device: one run at the selection's (b, f),
    its plan and the run's cap (a cap that changes re-selects with `reselector`), in
    the results folder (its checkpoint, its evaluation log), so a re-run resumes it."""

    cfg: RunConfig
    torch_device: str
    reselector: Optional[Reselector] = None

    @classmethod
    def of(cls, cfg: RunConfig, torch_device: str, profile: Profile, eff: Efficiency) -> _DeviceRun:
        if not changes(cfg.cap):
            return cls(cfg, torch_device)
        margined = profile.with_margin(cfg.power_margin_w)
        reselector = reselector_for(
            margined, eff, objective=cfg.objective, energy_budget_j=cfg.energy_budget_j
        )
        return cls(cfg, torch_device, reselector)

    def __call__(self, selection: Selection, folder: Path, progress: bool) -> TrainResult:
        from undercap.devices import open_device
        from undercap.train import train

        spec, options = self._spec_options(selection, folder, progress)
        device = open_device(self.cfg.device, seed=self.cfg.seed, **self.cfg.device_options)
        with device, self._refused_resume(options):
            return train(device, spec, loaded_splits(self.cfg.target), options, self.reselector)

    def check(self, selection: Selection, folder: Path) -> None:
        """Refuse, before `run` writes anything, a folder whose checkpoint is another
        run's (another cap's selection picked another batch size or clock)."""
        from undercap.train.checkpoint import check_resumable

        spec, options = self._spec_options(selection, folder, False)
        with self._refused_resume(options):
            check_resumable(self.cfg.device, spec, loaded_splits(self.cfg.target), options)

    def _spec_options(
        self, selection: Selection, folder: Path, progress: bool
    ) -> tuple[TrainSpec, RunOptions]:
        ckpt = folder / "checkpoint"
        spec = TrainSpec.from_selection(selection, cap=self.cfg.cap, torch_device=self.torch_device)
        return spec, RunOptions(
            checkpoint_dir=ckpt,
            resume=(ckpt / "checkpoint.pt").exists(),  # a re-run continues (or returns) the run
            progress=progress,
            eval_log=folder / "evals.csv",  # one row per evaluation, for pandas
            resume_hint=(  # the same `run` would select for, and stop at, the same cap
                f"`undercap train --from-selection {folder / 'selection.json'} --device "
                f"{self.cfg.device} --checkpoint-dir {ckpt} --eval-log {folder / 'evals.csv'} "
                f"-o {folder / 'train.json'} --resume --power-limit W` goes on from there "
                "under a higher limit W"
            ),
            wait_hint="run the same command again (once power is back, or with a longer "
            "--max-wait-s) to go on from there",
        )

    @contextlib.contextmanager
    def _refused_resume(self, options: RunOptions) -> Iterator[None]:
        """A checkpoint this run cannot continue: one line saying what to do."""
        try:
            yield
        except ArtifactError as e:
            if not options.resume:
                raise
            ckpt = options.checkpoint_dir
            raise UndercapError(
                f"cannot continue the training checkpointed in {ckpt} ({e}); use a new -o "
                f"folder or delete {ckpt}"
            ) from e


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
