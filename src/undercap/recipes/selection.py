"""`undercap select`: Algorithm 1 on a profile and r(b), the reasons each other batch
size is out, and both baselines at the safe frequency, as one Selection artifact.

Pure arithmetic on two artifacts: no torch import, so it answers instantly.
"""

from typing import Any, Dict, List, Optional, Tuple

from undercap import select as sel
from undercap.artifacts.efficiency import Efficiency
from undercap.artifacts.profile import Profile
from undercap.artifacts.selection import Selection
from undercap.errors import InfeasibleError, UndercapError
from undercap.select.pooling import as_set


def training_of(eff: Efficiency) -> Dict[str, Any]:
    """How device training repeats the estimate: its largest batch and base LR (sqrt
    scaling, paper Sec. 4.2) and the weights it started from."""
    cfg = eff.extra.get("config") or {}
    names = {"max_batch_size": "b_max", "base_lr": "base_lr", "pretrained": "pretrained"}
    return {k: cfg[c] for k, c in names.items() if cfg.get(c) is not None}


def build_selection(
    profile: Profile,
    eff: Efficiency,
    power_limit_w: Optional[float],
    *,
    proxy: Optional[Efficiency] = None,
    safe_freq_mhz: Optional[float] = None,
    training: Optional[Dict[str, Any]] = None,
    objective: str = "time",
    energy_budget_j: Optional[float] = None,
    margin_w: Optional[float] = None,
    precision: Optional[str] = None,
) -> Selection:
    """Our choice for `objective` (select/objectives.py; Algorithm 1 for time) in
    `precision` ("auto": the best of the profile's precisions), why batch sizes were
    left out, and both baselines (Baseline 2 picks from `proxy`, default `eff`), which
    run in fp32 where the profile has it (the paper's), else in the choice's precision.
    Expected speed-ups use r(b) from `eff`."""
    n_max, whole = eff.samples_bmax, profile.with_margin(margin_w)  # --power-margin-w
    choice = sel.choose(
        whole,
        eff.relative,
        power_limit_w,
        objective=objective,
        energy_budget_j=energy_budget_j,
        samples_bmax=n_max,
        precision=precision,
    )
    profile = whole.in_precision(choice.precision)
    extra = _choice_extra(choice, profile, eff, power_limit_w, n_max, objective, energy_budget_j)
    extra["precisions_profiled"] = list(whole.precisions)
    slices = [m.extra["slice"] for m in as_set(eff).members if "slice" in m.extra]
    if slices:  # r(b) from a slice of the target's own data: which, its size, seed, target
        extra["proxy_slices"] = slices
    base = whole.in_precision("fp32" if "fp32" in whole.precisions else choice.precision)
    safe, source, why_not = _safe_freq(base, power_limit_w, safe_freq_mhz)
    extra.update(safe_freq_mhz=safe, safe_freq_source=source)
    baselines = {
        "baseline1": lambda: sel.baseline1(base, power_limit_w, safe, relative=eff.relative),
        "baseline2": lambda: sel.baseline2(base, (proxy or eff).relative, power_limit_w, safe),
    }
    for name, make in baselines.items():
        extra[name] = _baseline(make, choice, eff, why_not)
    extra.update(_margin_extra(choice, profile, eff, margin_w))
    own = ("power_limit_w", "mean_power_w", "objective", "power_margin_w")
    return Selection(
        **{k: v for k, v in choice.to_dict().items() if k not in own},
        power_limit_w=power_limit_w,
        model=profile.model,
        device=profile.device.get("name", "unknown device"),
        simulated=profile.simulated,
        training={**(training or training_of(eff)), "precision": choice.precision},
        extra=extra,
        clock=profile.clock,
    )


def _choice_extra(
    choice: Any,
    profile: Profile,
    eff: Efficiency,
    power_limit_w: Optional[float],
    n_max: Optional[float],
    objective: str,
    energy_budget_j: Optional[float],
) -> Dict[str, Any]:
    """The selection's extra about the choice itself: what it was chosen for, what it
    predicts, its headroom, every candidate and why the others are out."""
    r = choice.relative_samples
    time_s = None if n_max is None or r is None else choice.time_per_sample_s * r * n_max
    power_w = choice.mean_power_w
    energy_j = None if time_s is None or power_w is None else power_w * time_s
    return {
        "objective": objective,
        "energy_budget_j": energy_budget_j,
        "mean_power_w": power_w,
        "samples_bmax": n_max,
        "predicted_time_s": time_s,
        "predicted_energy_j": energy_j,
        "headroom_w": None if power_limit_w is None else power_limit_w - choice.peak_power_w,
        "dataset": eff.dataset,
        "target_accuracy": eff.target_accuracy,
        "excluded_batch_sizes": _excluded(profile, eff, power_limit_w),
        "candidates": [c.to_dict() for c in sel.per_batch(profile, eff.relative, power_limit_w)],
    }


def _margin_extra(
    choice: Any, profile: Profile, eff: Efficiency, margin_w: Optional[float]
) -> Dict[str, Any]:
    """The choice's safety margin and where it comes from (select/core.py); an efficient
    profile that skipped batch sizes which could not win under its r(b) answers only for
    that r(b): say so when this efficiency differs."""
    if margin_w is not None:
        source = "given with --power-margin-w"
    elif any(r.peak_margin_w is not None for r in profile.rows):
        source = "measured while profiling: sensor noise and the peak's spread"
    else:
        source = "none: the profile predates measured margins (re-profile, or --power-margin-w)"
    note: Dict[str, Any] = {"power_margin_w": choice.power_margin_w, "power_margin_source": source}
    used = profile.sweep.get("relative") or {}
    pruned = profile.sweep.get("pruned") or {}
    if not pruned:
        return note
    note["pruned_batch_sizes"] = dict(pruned)
    if not all(abs(eff.relative.get(int(b), -1.0) - r) <= 1e-9 for b, r in used.items()):
        note["pruning_warning"] = (
            "the profile skipped batch sizes that could not win under another r(b); "
            "profile again with this --efficiency (or --full) before trusting this choice"
        )
    return note


def _excluded(profile: Any, eff: Any, power_limit_w: Optional[float]) -> List[Dict[str, Any]]:
    why = sel.excluded_batch_sizes(profile, eff.relative, power_limit_w)
    for b, reason in (profile.sweep.get("pruned") or {}).items():
        if int(b) in why:  # its rows stop at the first probe: pruning is the reason
            why[int(b)] = f"skipped while profiling: {reason}"
    for b in eff.excluded_batch_sizes:  # more specific than "no efficiency estimate"
        if b in profile.batch_sizes:
            why[b] = f"never reached {eff.target_accuracy:.0%} accuracy on {eff.dataset}"
    return [{"batch_size": b, "reason": r} for b, r in sorted(why.items())]


def _safe_freq(
    profile: Any, power_limit_w: Optional[float], given: Optional[float]
) -> Tuple[Optional[float], str, Optional[str]]:
    if given is not None:
        return given, "given with --safe-freq-mhz", None
    source = "derived from this profile alone (pass --safe-freq-mhz for a cap over all models)"
    try:
        return sel.safe_freq_mhz([profile], power_limit_w), source, None
    except InfeasibleError as e:
        return None, source, str(e)


def _baseline(make: Any, choice: Any, eff: Any, why_not: Optional[str]) -> Dict[str, Any]:
    """A baseline's choice and our expected speed-up over it, or why it has none."""
    if why_not is not None:
        return {"available": False, "reason": why_not}
    try:
        base = make()
    except UndercapError as e:
        return {"available": False, "reason": str(e)}
    out: Dict[str, Any] = {"available": True, **base.to_dict()}
    r = eff.relative.get(base.batch_size)
    if r is None:
        out["expected_speedup"] = None
        out["speedup_note"] = (
            f"batch size {base.batch_size} has no r(b) in the efficiency estimate "
            "(it never reached the target there): no finite time-to-accuracy to compare"
        )
    else:
        # a ratio of times, whatever the objective: t * r of each
        ours = choice.time_per_sample_s * choice.relative_samples
        out["expected_speedup"] = base.time_per_sample_s * r / ours
    return out
