"""Baselines vs ours vs the oracle for one scenario (paper Sec. 5, Tables 2-4).

A scenario is a model, a proxy and a target dataset, a device and a list of power
limits. For each limit four methods pick a (batch size, frequency): Baselines 1 and 2,
ours and the oracle (docs/concepts/method.md; select/).

The safe frequency is derived, not typed in (recipes/baselines.py); r_proxy and
r_target come from the same estimate on the proxy and on the target, from the same
pre-trained weights. Every method's configuration is then trained on the target on
the device once per seed (recipes/device_runs.py). Limits go tight to loose: a run
(b, f, seed) under a limit where the power guard never acted is the very run a looser
limit (or no limit) would give, so it is reused and recorded as shared
(RunRecord.shared_from).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from undercap import defaults
from undercap.artifacts.cache import Cache
from undercap.artifacts.comparison import ChoiceRecord, Comparison, limit_label, limit_sort_key
from undercap.artifacts.efficiency import EfficiencySet, save_efficiency, save_efficiency_set
from undercap.artifacts.io import save_json
from undercap.artifacts.profile import Profile, save_profile
from undercap.artifacts.provenance import provenance
from undercap.artifacts.selection import save_selection
from undercap.data.spec import DataSpec
from undercap.errors import UndercapError
from undercap.recipes.baselines import safe_frequencies, safe_profiles
from undercap.recipes.common import (
    Log,
    TrainingSetup,
    estimate_efficiency,
    reuse_or_profile,
    stderr_log,
    with_pretrained,
)
from undercap.recipes.device_runs import DeviceTrainer, TrainFn, train_all
from undercap.recipes.ensemble import ensemble_selection  # one proxy: build_selection
from undercap.recipes.profiling import check_feasible
from undercap.select import baseline1, baseline2, oracle, select_ours
from undercap.select.core import profiles_in
from undercap.select.pooling import as_set, pooled_efficiency


@dataclass(frozen=True)
class CompareConfig:
    """What `undercap compare` runs: the paper's baselines, undercap's choice and the
    oracle, trained on the target for every power limit and seed.

    Args:
        device: Device name, as `--device`: `sim:jetson-nano`, `jetson`, `nvml:0`, ...
        model: Built-in model name or your factory (`path/to/file.py:build`).
        proxy: Dataset r(b) is estimated on (undercap's choice and Baseline 2).
        target: Dataset trained on; r(b) on it gives the oracle.
        power_limits_w: The caps in W; None in the tuple: no cap.
        setup: What every training run shares: batch sizes, budget, learning rate.
        seeds: Seeds of the device training runs, one run per method, cap and seed.
        target_accuracy: Test accuracy on the target at which training stops, or ...
        target_fraction: ... this fraction of the largest batch's best accuracy.
        proxy_accuracy: Target accuracy of the proxy estimate; None: `target_accuracy`.
        estimate_seeds: Seeds of the r(b) estimates; None: `seeds`.
        pretrain_source: Dataset to pre-train on first; every run starts from its weights.
        pretrain_samples: Pre-training budget in samples; None: 5 epochs.
        profile: Path of a profile of the model to reuse instead of profiling.
        safe_profiles: Real devices: profiles of the other supported models, for the
            baselines' safe frequency (the highest at which no model exceeds the cap).
        cache_dir: Cache of profiles and estimates, shared between runs; None: `OUT_DIR/cache`.
        device_options: Keyword arguments of `open_device` (`read_only`, `sysfs_root`,
            `allow_clock_control`).
        power_margin_w: Safety margin added to every profiled peak; None: each
            configuration's measured margin, 0: none (the paper's test).
        proxies: Several proxies (replace `proxy`): undercap's choice uses the ensemble
            rule, Algorithm 1 on their median r(b).
        precision: The arithmetic ours and the oracle train in: `"fp32"`, `"fp16"`,
            `"bf16"`, or `"auto"` (chosen with (b, f) among the device's).
        baseline_precision: The baselines' (the paper's: fp32).
    """

    device: str
    model: str
    proxy: DataSpec
    target: DataSpec
    power_limits_w: tuple[Optional[float], ...]
    setup: TrainingSetup
    seeds: tuple[int, ...] = (0, 1, 2)
    target_accuracy: Optional[float] = None
    target_fraction: Optional[float] = None
    proxy_accuracy: Optional[float] = None
    estimate_seeds: Optional[tuple[int, ...]] = None
    pretrain_source: Optional[DataSpec] = None
    pretrain_samples: Optional[int] = None
    profile: Optional[str] = None
    safe_profiles: tuple[str, ...] = ()
    cache_dir: Optional[str] = None
    device_options: dict[str, Any] = field(default_factory=dict)
    power_margin_w: Optional[float] = None
    proxies: tuple[DataSpec, ...] = ()
    precision: str = "fp32"
    baseline_precision: str = "fp32"

    def precisions(self, device: Any) -> tuple[str, ...]:
        """What to profile in: the baselines' precision and ours (auto: all the device runs)."""
        ours = device.precisions() if self.precision == "auto" else (self.precision,)
        wanted = {*ours, self.baseline_precision}
        return tuple(p for p in defaults.PRECISIONS if p in wanted)

    def validate(self) -> None:
        if not self.power_limits_w:
            raise UndercapError("give at least one power limit, e.g. --power-limits 5,7,none")
        finite = [x for x in self.power_limits_w if x is not None]
        if any(x <= 0 for x in finite) or len(set(self.power_limits_w)) != len(self.power_limits_w):
            labels = ", ".join(limit_label(x) for x in self.power_limits_w)
            raise UndercapError(f"power limits {labels} must be distinct positive watts or 'none'")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UndercapError(f"seeds {list(self.seeds)} must be distinct and non-empty")
        if (self.target_accuracy is None) == (self.target_fraction is None):
            raise UndercapError("give exactly one of --target-accuracy or --target-fraction")


def choose_all(
    profile: Profile,
    relative_proxy: dict[int, float],
    relative_target: dict[int, float],
    limits: Sequence[Optional[float]],
    safe_freqs: dict[Optional[float], float],
    margin_w: Optional[float] = None,
    precision: Optional[str] = None,
    baseline_precision: Optional[str] = None,
) -> list[ChoiceRecord]:
    """Every method's configuration for every limit (select.*), each feasible with the
    safety margin (`margin_w`, None: the profile's measured ones): the baselines in
    `baseline_precision`, ours and the oracle in `precision` (select.core.profiles_in)."""
    out, m = [], margin_w
    (base,) = profiles_in(profile, baseline_precision)
    for lim in sorted(limits, key=limit_sort_key):
        f_safe = safe_freqs[lim]
        picks = [
            (baseline1(base, lim, f_safe, relative=relative_proxy, margin_w=m), f_safe),
            (baseline2(base, relative_proxy, lim, f_safe, margin_w=m), f_safe),
            (select_ours(profile, relative_proxy, lim, margin_w=m, precision=precision), None),
            (oracle(profile, relative_target, lim, margin_w=m, precision=precision), None),
        ]
        for c, safe in picks:  # as the comparison records it: score dropped, safe clock added
            kept = {k: v for k, v in c.to_dict().items() if k in ChoiceRecord.__dataclass_fields__}
            out.append(ChoiceRecord(**kept, safe_freq_mhz=safe))
    return out


# --- the whole comparison ----------------------------------------------------------------
def run_comparison(
    cfg: CompareConfig,
    out_dir: Union[str, Path],
    *,
    train_fn: Optional[TrainFn] = None,
    progress: bool = True,
    log: Log = stderr_log,
) -> Comparison:
    """Profile, estimate, select and train for every limit, method and seed; write
    the results folder (JSON, CSVs, Markdown, figures) and return the record."""
    cfg.validate()
    out = Path(out_dir)
    cache = Cache(cfg.cache_dir or out / "cache")
    t0 = time.monotonic()
    profile, safe, simulated = _device_side(cfg, cache, progress, log)
    save_profile(out / "profile.json", profile)
    setup, eff_proxy, eff_target = _estimates(cfg, cache, progress, log)
    save_efficiency_set(out / "efficiency-proxy.json", as_set(eff_proxy))  # several: a set
    save_efficiency(out / "efficiency-target.json", eff_target)
    _save_selections(out, profile, eff_proxy, cfg, safe)
    rel = (eff_proxy.relative, eff_target.relative)
    choices = choose_all(
        profile,
        *rel,
        cfg.power_limits_w,
        safe,
        cfg.power_margin_w,
        cfg.precision,
        cfg.baseline_precision,
    )
    if train_fn is None:  # on the device; read-only: the profile's clock is never locked
        train_fn = DeviceTrainer(
            cfg, setup, eff_target.target_accuracy, cache, progress, log, clock=profile.clock
        )
    runs = train_all(choices, cfg.seeds, train_fn, log=log)
    comparison = Comparison(
        device=cfg.device,
        simulated=simulated,
        model=cfg.model,
        proxy=" + ".join(p.label for p in cfg.proxies or (cfg.proxy,)),
        target=cfg.target.label,
        target_accuracy=eff_target.target_accuracy,
        power_limits_w=tuple(cfg.power_limits_w),
        seeds=tuple(cfg.seeds),
        choices=tuple(choices),
        runs=tuple(runs),
        settings=_settings(cfg, setup, eff_proxy, eff_target, safe),
        provenance=provenance(device=cfg.device, simulated=simulated, wall_s=time.monotonic() - t0),
    )
    save_json(out / "comparison.json", comparison.to_dict())
    from undercap.report.compare import write_comparison_report

    write_comparison_report(comparison, out, profile)
    return comparison


def _device_side(
    cfg: CompareConfig, cache: Cache, progress: bool, log: Log
) -> tuple[Profile, dict[Optional[float], float], bool]:
    """The scenario's profile, the baselines' safe frequency per limit, and whether
    the device is simulated; fails early on a limit no configuration meets."""
    from undercap.devices import open_device

    with open_device(cfg.device, seed=0, **cfg.device_options) as device:
        profile = scenario_profile(cfg, device, cache, progress, log)
        check_feasible(profile, cfg.power_limits_w, cfg.power_margin_w)
        base = profile.in_precision(cfg.baseline_precision)
        profiles = safe_profiles(
            device,
            base,
            cache=cache,
            given=cfg.safe_profiles,
            progress=progress,
            log=log,
            precision=cfg.baseline_precision,
        )
        safe = safe_frequencies(profiles, cfg.power_limits_w, cfg.power_margin_w, own=base)
        return profile, safe, device.is_simulated


def _save_selections(
    out: Path,
    profile: Profile,
    eff_proxy: Any,
    cfg: CompareConfig,
    safe: dict[Optional[float], float],
) -> None:
    """Ours for every limit as a selection artifact (`train --from-selection` reads it):
    selection-<limit>.json, e.g. selection-3.5W.json, selection-none.json."""
    for lim in cfg.power_limits_w:
        name = "none" if lim is None else f"{lim:g}W"
        sel = ensemble_selection(
            profile,
            eff_proxy,
            lim,
            safe_freq_mhz=safe[lim],
            margin_w=cfg.power_margin_w,
            precision=cfg.precision,
        )
        save_selection(out / f"selection-{name}.json", sel)


def scenario_profile(
    cfg: CompareConfig, device: Any, cache: Cache, progress: bool, log: Log
) -> Profile:
    return reuse_or_profile(
        device,
        cfg.model,
        cfg.target,
        cfg.setup.batch_sizes,
        given=cfg.profile,
        cache=cache,
        progress=progress,
        log=log,
        precisions=cfg.precisions(device),
    )


def _estimates(
    cfg: CompareConfig, cache: Cache, progress: bool, log: Log
) -> tuple[TrainingSetup, Any, Any]:
    """The pre-trained start every run shares, and r(b) from it on the proxies (their
    median) and on the target (the oracle's)."""
    setup = with_pretrained(
        cfg.setup,
        cfg.pretrain_source,
        max_samples=cfg.pretrain_samples,
        cache=cache,
        progress=progress,
        log=log,
    )
    seeds = cfg.estimate_seeds or cfg.seeds
    proxy_acc = cfg.proxy_accuracy if cfg.proxy_accuracy is not None else cfg.target_accuracy
    common = {"seeds": seeds, "cache": cache, "progress": progress, "log": log, "role": "proxy"}
    proxy_fraction = None if proxy_acc is not None else cfg.target_fraction
    effs = [
        estimate_efficiency(
            setup, spec, target_accuracy=proxy_acc, target_fraction=proxy_fraction, **common
        )
        for spec in cfg.proxies or (cfg.proxy,)
    ]
    eff_proxy = pooled_efficiency(EfficiencySet.of(effs))  # several: the median r(b)
    eff_target = estimate_efficiency(
        setup,
        cfg.target,
        target_accuracy=cfg.target_accuracy,
        target_fraction=cfg.target_fraction,
        **dict(common, role="target"),
    )
    return setup, eff_proxy, eff_target


def _settings(
    cfg: CompareConfig, setup: TrainingSetup, eff_proxy: Any, eff_target: Any, safe: dict
) -> dict[str, Any]:
    return {
        "batch_sizes": list(setup.batch_sizes),
        "max_samples": setup.max_samples,
        "eval_every_samples": setup.eval_every_samples,
        "eval_max_samples": setup.eval_max_samples,
        "lr": setup.lr,
        "pretrained": setup.pretrained,
        "pretrain_source": None if cfg.pretrain_source is None else cfg.pretrain_source.dataset,
        "pretrain_samples": cfg.pretrain_samples,
        "proxy_target_accuracy": eff_proxy.target_accuracy,
        "target_fraction": cfg.target_fraction,
        "estimate_seeds": list(cfg.estimate_seeds or cfg.seeds),
        "relative_proxy": {str(b): r for b, r in sorted(eff_proxy.relative.items())},
        "relative_target": {str(b): r for b, r in sorted(eff_target.relative.items())},
        "safe_freq_mhz": {limit_label(k): v for k, v in safe.items()},
        "data_dir": cfg.target.data_dir,
    }
