"""Lines about what profiling cost and the safety margin, for the text summaries of
`profile`, `select` and `run` (report/text.py). Pure formatting, no torch, no numpy."""

from typing import Any, Dict, List, Optional

from undercap.artifacts.profile import Profile


def cost_lines(profile: Profile) -> List[str]:
    """Device time, energy and wall time of the profile, and what its shortcuts saved."""
    c = profile.cost
    lines = [
        f"  profiling cost: {c['device_time_s']:.1f} s device time, {c['energy_j']:.1f} J, "
        f"{c.get('wall_s', 0.0):.1f} s wall"
        + (f"; {c['steps']} mini-batches" if c.get("steps") is not None else "")
    ]
    saved = c.get("saved") or {}
    if saved.get("grid_configurations"):
        why = "; ".join(f"{n} {reason}" for reason, n in (saved.get("by_reason") or {}).items())
        lines.append(
            f"  not measured: {saved['configurations_not_measured']} of "
            f"{saved['grid_configurations']} configurations"
            + (f" ({why})" if why else "")
            + f"; {saved.get('warmup_steps_shared', 0)} warm-up mini-batches shared across clocks"
        )
    for b, reason in (profile.sweep.get("pruned") or {}).items():
        lines.append(f"  batch size {b} skipped: {reason}")
    return lines


def margin_lines(profile: Profile) -> List[str]:
    """The range of the rows' safety margins and how they were sized."""
    margins = [r.peak_margin_w for r in profile.rows if r.peak_margin_w is not None]
    if not margins:
        return []
    m = profile.sweep.get("margin") or {}
    how = (
        f" (z = {m['z']:.2f} window noise over a {m['run_s'] / 3600:g} h run of {m['window_s']:g} s "
        "windows, plus the peak's spread)"
        if {"z", "run_s", "window_s"} <= set(m)
        else ""
    )
    return [f"  safety margin added to each peak: {min(margins):.3f} .. {max(margins):.3f} W{how}"]


def selection_margin(res: Dict[str, Any]) -> List[str]:
    """The selection's safety margin line: feasible meant peak + margin <= limit."""
    m: Optional[float] = res.get("power_margin_w")
    if m is None:
        return []
    source = res.get("power_margin_source")
    return [
        f"    safety margin {m:.2f} W"
        + (f" ({source})" if source else "")
        + ": feasible means peak + margin within the limit"
    ]


def run_cost_line(selection: Any) -> Optional[str]:
    """The run summary's line on profiling's cost against the training it chose."""
    c = selection.extra.get("profiling_cost")
    if not c or c.get("device_time_s") is None:
        return None
    frac = c.get("fraction_of_training_time")
    efrac = c.get("fraction_of_training_energy")
    return (
        f"- profiling cost: {c['device_time_s']:.1f} s device time, {c['energy_j']:.1f} J"
        + ("" if frac is None else f"; {100 * frac:.1f}% of the training's device time")
        + ("" if efrac is None else f", {100 * efrac:.1f}% of its energy")
    )
