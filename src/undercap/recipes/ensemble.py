"""Several proxies in `run`, `compare` and `select`: their artifacts loaded and pooled
into one r(b) (select/pooling.py: the median the `ensemble` rule ranks with, which is
what the rest of a recipe sees), what they support checked, and the selection with
every proxy's view (select/ensemble.py).
"""

import dataclasses
from typing import Any, Optional, Sequence

from undercap.artifacts.efficiency import Efficiency, load_efficiencies
from undercap.artifacts.profile import Profile
from undercap.artifacts.selection import Selection
from undercap.errors import UndercapError
from undercap.select.ensemble import ENSEMBLE, select_ensemble
from undercap.select.pooling import RULE_TEXT, as_set, pooled_efficiency, several


def load_pooled(paths: Sequence[str], model: str) -> Efficiency:
    """Efficiency files (single artifacts or sets) as one pooled Efficiency of `model`."""
    effs = load_efficiencies(paths)
    if effs.model != model:
        raise UndercapError(
            f"efficiency {', '.join(paths)} is of {effs.model}, not {model}; estimate it for "
            "this model"
        )
    return pooled_efficiency(effs)


def check_several(sources: int, objective: str, eff: Optional[Efficiency] = None) -> None:
    """What several proxies support, checked before any estimate (`sources`: the proxies
    or efficiency files named) and again once the artifacts are read (one file may hold
    several): the ensemble rule, for time."""
    if (sources > 1 or (eff is not None and several(eff))) and objective != "time":
        raise UndercapError(
            "several proxies rank time to accuracy only; use --objective time or one proxy"
        )
    # A changing cap needs nothing more: re-selecting with the pooled (median) r(b) at
    # each cap is the ensemble rule at that cap (train/session/follow.reselector_for).


def ensemble_selection(
    profile: Profile, eff: Efficiency, limit: Optional[float], **kw: Any
) -> Selection:
    """recipes.selection.build_selection on the pooled r(b) (whose Algorithm 1 choice is
    the ensemble rule's), with the rule's name and every proxy's view in extra
    ["ensemble"]; the keywords are build_selection's."""
    from undercap.recipes.selection import build_selection

    selection = build_selection(profile, eff, limit, **kw)
    if not several(eff):
        return selection
    effs = as_set(eff)
    chosen = profile.in_precision(selection.precision).with_margin(kw.get("margin_w"))
    ens = select_ensemble(chosen, effs.relatives, limit)
    if (ens.choice.batch_size, ens.choice.freq_mhz) != (selection.batch_size, selection.freq_mhz):
        raise AssertionError("the pooled r(b)'s Algorithm 1 choice is the ensemble rule's")
    block = {**ens.to_dict(), "rule_text": RULE_TEXT}  # each proxy's choice, its regret
    for view, member in zip(block["proxies"], effs.members):
        view.update(
            relative_at_choice=member.relative.get(ens.choice.batch_size), dataset=member.dataset
        )
    extra = {**selection.extra, "ensemble": block}
    return dataclasses.replace(selection, method=ENSEMBLE, extra=extra)
