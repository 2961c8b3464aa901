"""The online rule (train/online.py) in a loop of your own: `capped(..., online=True)` and
the trainer callbacks (callbacks.py, lightning.py, hf.py).

`capped()`'s `report()` is the evaluation the rule looks at. Where the loop can change its
batch size (`switch_batch=True`, the default), a switch is made at once, as a changing
cap's is: re-read `cap.batch_size` and `cap.lr()` after `report()`. Where it cannot (a
trainer whose loader holds its batch size: `switch_batch=False`), the switch is kept as
`cap.proposed` for the callback: Lightning applies it at the end of an epoch when the
Trainer reloads its dataloaders there (`reload_dataloaders_every_n_epochs`); the Hugging
Face Trainer, whose batch size is fixed before training, reports it (OnlineWarning) and
says how to apply it: train again with that batch size.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from undercap import defaults
from undercap.errors import UndercapError
from undercap.train.online import OnlineRule, from_profile, rule_for, say
from undercap.train.schedule import OperatingPoint


class OnlineWarning(UserWarning):
    """The online rule would switch, but the trainer's batch size cannot change here."""


def loop_rule(
    online: Any,
    selection: Any,
    target_accuracy: Optional[float],
    profile: Any,
    proxies: Any,
    race: bool = False,
) -> Optional[OnlineRule]:
    """capped()'s `online`: off (False/None) -> None; a rule made already (a trainer
    callback's) as it is; True -> from the selection's online block (a Selection or its
    path), else from `proxies` (efficiency artifacts with recorded curves, as Efficiency
    objects, an EfficiencySet or paths) and a `profile`. Not with a race (`race`)."""
    if not online:
        return None
    if race:
        raise UndercapError("capped(): online=True and race=True both re-decide: pick one")
    if isinstance(online, OnlineRule):
        return online
    prof = None if profile is None else _profile(profile)
    if isinstance(selection, (str, Path)):
        from undercap.artifacts.selection import load_selection

        selection = load_selection(selection)
    if selection is not None and hasattr(selection, "extra"):
        return rule_for(selection, target_accuracy, profile=prof)
    if proxies is not None and prof is not None:
        return _from_proxies(proxies, target_accuracy, prof)
    raise UndercapError(
        "capped(online=True) needs a selection made from several proxies (its online block), "
        "or proxies= (efficiency artifacts with recorded curves) and profile="
    )


def _profile(profile: Any) -> Any:
    from undercap.artifacts.profile import Profile, load_profile

    return profile if isinstance(profile, Profile) else load_profile(profile)


def _from_proxies(proxies: Any, target_accuracy: Optional[float], profile: Any) -> OnlineRule:
    from undercap.artifacts.efficiency import Efficiency, EfficiencySet, load_efficiencies
    from undercap.select.online_data import ONLINE_KEY, from_block, online_block

    if isinstance(proxies, Mapping):
        raise UndercapError(
            "capped(online=True): proxies given as r(b) alone have no recorded curves to "
            "re-weigh by; pass their efficiency artifacts (or paths)"
        )
    if isinstance(proxies, EfficiencySet):
        effs = proxies
    elif all(isinstance(p, Efficiency) for p in proxies):
        effs = EfficiencySet.of(list(proxies))
    else:  # paths; a {name: r(b)} mapping has no curves and is refused by from_block
        effs = load_efficiencies([str(p) for p in proxies])
    data = from_block({ONLINE_KEY: online_block(effs.names, effs.members)}, "proxies=")
    if target_accuracy is None:
        raise UndercapError("capped(online=True) needs target_accuracy=")
    common = sorted(set.intersection(*(set(p.relative) for p in data.proxies)))
    return OnlineRule(data, target_accuracy, from_profile(profile, common))


def look(cap: Any, accuracy: float) -> None:
    """capped()'s report(): the rule's look (module docstring)."""
    rule, session = cap.online, cap.session
    b = cap.batch_size
    d = rule.observe(accuracy, b, session.power_limit_w, session.guard.events)
    done = [sum(at.values()) for at, _ in rule.points[-2:]]
    if done[-1] - (done[0] if len(done) > 1 else 0) > defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES:
        cap._warn(  # once: what the rule was measured with (defaults.py)
            "online=True: report() more often than every "
            f"{defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES} samples; the online rule was "
            "measured with evaluations at least that often"
        )
    cap.proposed = None
    if d is None or not d.switch:
        return
    op = rule.operating_point(d, session.power_limit_w)
    if session.switch_batch:
        say(None, rule.record(d, b, session.samples, applied=True))
        session.reselect(op)
    else:
        cap.proposed = (d, op)


def apply_proposed(cap: Any) -> Optional[OperatingPoint]:
    """Make the switch the rule proposed (a trainer about to reload its loaders)."""
    if cap.proposed is None:
        return None
    (d, op), b = cap.proposed, cap.batch_size
    cap.proposed = None
    say(None, cap.online.record(d, b, cap.session.samples, applied=True))
    cap.session.reselect(op)
    return op


def report_proposed(cap: Any, how: str) -> None:
    """Say the switch the rule would make, once per batch size it names, and `how` to
    apply it."""
    if cap.proposed is None:
        return
    (d, _), b = cap.proposed, cap.batch_size
    cap.proposed = None
    if d.batch_size in {s["to_batch_size"] for s in cap.online.switches if not s["applied"]}:
        return  # said already
    line = cap.online.record(d, b, cap.session.samples, applied=False)
    warnings.warn(f"{line}; {how}", OnlineWarning, stacklevel=2)
