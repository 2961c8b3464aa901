"""Several proxies pooled into one r(b): the median over the proxies of r(b), the rule
the `ensemble` selection ranks with (select/ensemble.py), as one Efficiency that keeps
every proxy's artifact under extra["proxies"] (artifacts/efficiency.py,
undercap.efficiency-set/1). Pure and torch-free: recipes, capped() and the
selection command all pool through here.
"""

import statistics
from collections.abc import Mapping
from typing import Any, Dict

from undercap.artifacts.efficiency import (
    EFFICIENCY_SET_SCHEMA,
    Efficiency,
    EfficiencySet,
    load_efficiencies,
)
from undercap.select.ensemble import combined_relative

RULE_TEXT = "Algorithm 1 on the median over the proxies of r(b)"


def pooled_efficiency(effs: EfficiencySet) -> Efficiency:
    """One Efficiency for a recipe: r(b) = the median over the proxies (the batch sizes
    every proxy reached the target with), N(b_max) = the median of theirs, each
    proxy's runs side by side, and the proxies themselves under extra["proxies"]."""
    if len(effs.members) == 1:
        return effs.members[0]
    rel = combined_relative(effs.relatives)
    members = effs.members
    bs = sorted(set().union(*(e.samples_to_target for e in members)))
    runs = {b: tuple(n for e in members for n in e.samples_to_target.get(b, (None,))) for b in bs}
    n_max = [e.samples_bmax for e in members if e.samples_bmax is not None]
    ref = max(rel)
    extra = {
        "reference_batch_size": ref,
        "samples_to_target_mean": {str(ref): statistics.median(n_max)} if n_max else {},
        "config": dict(members[0].extra.get("config") or {}),
        "pooled": f"{RULE_TEXT} ({len(members)} proxies)",
        "proxies": effs.to_dict()["proxies"],
    }
    dataset = " + ".join(effs.names)
    return Efficiency(members[0].model, dataset, members[0].target_accuracy, runs, rel, extra)


def as_set(eff: Efficiency) -> EfficiencySet:
    """The proxies behind an Efficiency (one: itself)."""
    if "proxies" in eff.extra:
        obj = {"schema": EFFICIENCY_SET_SCHEMA, "proxies": eff.extra["proxies"]}
        return EfficiencySet.from_dict(obj, f"<pooled {eff.dataset}>")
    return EfficiencySet.of([eff])


def several(eff: Efficiency) -> bool:
    return "proxies" in eff.extra


def proxies_relative(proxies: Any) -> Dict[int, float]:
    """The median r(b) of several proxies given as {name: r(b)}, an EfficiencySet, or a
    list of Efficiency objects or artifact paths (capped()'s `proxies=`)."""
    if isinstance(proxies, EfficiencySet):
        return pooled_efficiency(proxies).relative
    if isinstance(proxies, Mapping):
        return combined_relative(proxies)
    items = list(proxies)
    if items and all(isinstance(x, Efficiency) for x in items):
        return pooled_efficiency(EfficiencySet.of(items)).relative
    return pooled_efficiency(load_efficiencies([str(x) for x in items])).relative
