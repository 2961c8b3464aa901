"""r(b) for `run`: reused efficiency artifacts, or each proxy's estimate (a slice of
the target's own training split among them: `--proxy-slice`), several pooled by the
ensemble rule (recipes/ensemble.py)."""

from typing import Any, Dict, Optional

from undercap import defaults
from undercap.artifacts.cache import Cache
from undercap.artifacts.efficiency import Efficiency, EfficiencySet
from undercap.data.spec import DataSpec, describe_slice
from undercap.errors import UndercapError
from undercap.recipes.common import Log, TrainingSetup, estimate_efficiency
from undercap.recipes.ensemble import check_several, load_pooled
from undercap.select.pooling import pooled_efficiency


def run_efficiency(
    cfg: Any, setup: TrainingSetup, cache: Cache, progress: bool, log: Log
) -> Efficiency:
    """r(b) on the proxies (`cfg` a RunConfig): several pooled, and checked before any
    estimate runs."""
    sources = max(len(cfg.proxies), len(cfg.efficiencies))
    check_several(sources, cfg.objective)
    paths = cfg.efficiencies or ((cfg.efficiency,) if cfg.efficiency else ())
    if paths:
        eff = load_pooled(paths, cfg.model)
        check_several(sources, cfg.objective, eff)  # one file may hold several
        log(f"reusing r(b) from {', '.join(paths)} ({eff.dataset})")
        return eff
    specs = cfg.proxies or ((cfg.proxy,) if cfg.proxy is not None else ())
    if not specs:
        raise UndercapError(
            "give --proxy SPEC or --proxy-slice PCT (to estimate r(b)), or --efficiency FILE"
        )
    effs = [
        estimate_efficiency(
            setup,
            spec,
            seeds=cfg.estimate_seeds,
            **_proxy_target(cfg, spec),
            cache=cache,
            role="proxy",
            progress=progress,
            log=log,
        )
        for spec in specs
    ]
    return pooled_efficiency(EfficiencySet.of(effs))


def _proxy_target(cfg: Any, spec: DataSpec) -> Dict[str, Optional[float]]:
    """A proxy's target: --proxy-accuracy, or --proxy-fraction of its best, else the
    device run's. A slice of the target: the device run's target, capped at a fraction
    of what the slice reaches (defaults.SLICE_TARGET_FRACTION; benchmarks/results/slice)."""
    if spec.slice_fraction is not None:
        acc, fraction = cfg.target_accuracy, defaults.SLICE_TARGET_FRACTION
    else:
        acc = cfg.proxy_accuracy
        if acc is None and cfg.proxy_fraction is None:
            acc = cfg.target_accuracy
        fraction = None if acc is not None else cfg.proxy_fraction
    return {"target_accuracy": acc, "target_fraction": fraction}


def check_slices(cfg: Any) -> None:
    """Load every slice proxy once: one that cannot hold each class fails now (one line
    naming the smallest slice that can), not after the device was profiled."""
    for spec in cfg.proxies or ((cfg.proxy,) if cfg.proxy is not None else ()):
        if spec.slice_fraction is not None and not (cfg.efficiency or cfg.efficiencies):
            describe_slice(spec)
