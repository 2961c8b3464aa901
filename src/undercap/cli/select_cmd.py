"""`undercap select`: the batch size and GPU frequency to train with (Algorithm 1).

Reads a profile and an efficiency artifact, applies the paper's Algorithm 1
(Sec. 4.3) and compares with Baseline 1 and 2 (Sec. 5.1) at the safe frequency.
Pure arithmetic on two JSON files: no torch import, so it answers instantly.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from undercap.cli.common import positive_float, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "select",
        help="pick the batch size and GPU frequency that reach the target fastest under a cap",
        description="Apply Algorithm 1 to a device profile and a batch-size efficiency "
        "estimate, and compare with the fixed-frequency baselines.",
    )
    p.add_argument("--profile", type=Path, required=True, help="profile JSON (undercap profile)")
    p.add_argument(
        "--efficiency", type=Path, required=True, help="efficiency JSON (undercap estimate)"
    )
    p.add_argument(
        "--power-limit", type=positive_float, required=True, metavar="W", help="power cap in W"
    )
    p.add_argument(
        "--safe-freq-mhz",
        type=positive_float,
        default=None,
        metavar="F",
        help="the baselines' fixed safe frequency (default: derived from this profile alone; "
        "the paper uses the highest frequency safe for every supported model)",
    )
    p.add_argument(
        "--proxy-efficiency",
        type=Path,
        default=None,
        metavar="E2",
        help="efficiency JSON Baseline 2 picks its batch size from (default: --efficiency)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_select)


def cmd_select(args: argparse.Namespace) -> int:
    from undercap.artifacts import load_efficiency, load_profile

    profile = load_profile(args.profile)
    eff = load_efficiency(args.efficiency)
    _same_model(profile, eff, args.profile, args.efficiency)
    proxy = eff
    if args.proxy_efficiency is not None:
        proxy = load_efficiency(args.proxy_efficiency)
        _same_model(profile, proxy, args.profile, args.proxy_efficiency)
    result = build_result(profile, eff, proxy, args.power_limit, args.safe_freq_mhz)
    result.update(
        profile=str(args.profile),
        efficiency=str(args.efficiency),
        proxy_efficiency=str(args.proxy_efficiency or args.efficiency),
    )
    if args.json:
        print_json(result)
    else:
        print(format_summary(result))
    return 0


def _same_model(profile: Any, eff: Any, profile_path: Path, eff_path: Path) -> None:
    from undercap.errors import ArtifactError

    if profile.model != eff.model:
        raise ArtifactError(
            f"{profile_path} profiles model {profile.model!r} but {eff_path} is for "
            f"{eff.model!r}; use artifacts made for the same model"
        )


# --- the result object (also what --json prints) ----------------------------------
def build_result(
    profile: Any,
    eff: Any,
    proxy: Any,
    power_limit_w: float,
    safe_freq_mhz: float | None,
) -> dict[str, Any]:
    """Our choice, why batch sizes were left out, and both baselines, as JSON-able
    data. Expected speed-ups use r(b) from `eff` for every method."""
    from undercap import select as sel

    choice = sel.select_ours(profile, eff.relative, power_limit_w)
    out: dict[str, Any] = choice.to_dict()
    out.update(
        model=profile.model,
        device=profile.device.get("name", "unknown device"),
        simulated=profile.simulated,
        headroom_w=power_limit_w - choice.peak_power_w,
        dataset=eff.dataset,
        target_accuracy=eff.target_accuracy,
        excluded_batch_sizes=_excluded(profile, eff, power_limit_w),
        candidates=[c.to_dict() for c in sel.per_batch(profile, eff.relative, power_limit_w)],
    )
    safe, source, why_not = _safe_freq(profile, power_limit_w, safe_freq_mhz)
    out.update(safe_freq_mhz=safe, safe_freq_source=source)
    out["baseline1"] = _baseline(
        lambda: sel.baseline1(profile, power_limit_w, safe, relative=eff.relative),
        choice,
        eff,
        why_not,
    )
    out["baseline2"] = _baseline(
        lambda: sel.baseline2(profile, proxy.relative, power_limit_w, safe), choice, eff, why_not
    )
    return out


def _excluded(profile: Any, eff: Any, power_limit_w: float) -> list[dict[str, Any]]:
    from undercap.select import excluded_batch_sizes

    why = excluded_batch_sizes(profile, eff.relative, power_limit_w)
    for b in eff.excluded_batch_sizes:  # more specific than "no efficiency estimate"
        if b in profile.batch_sizes:
            why[b] = f"never reached {eff.target_accuracy:.0%} accuracy on {eff.dataset}"
    return [{"batch_size": b, "reason": r} for b, r in sorted(why.items())]


def _safe_freq(
    profile: Any, power_limit_w: float, given: float | None
) -> tuple[float | None, str, str | None]:
    from undercap.errors import InfeasibleError
    from undercap.select import safe_freq_mhz

    if given is not None:
        return given, "given with --safe-freq-mhz", None
    source = "derived from this profile alone (pass --safe-freq-mhz for a cap over all models)"
    try:
        return safe_freq_mhz([profile], power_limit_w), source, None
    except InfeasibleError as e:
        return None, source, str(e)


def _baseline(make: Any, choice: Any, eff: Any, why_not: str | None) -> dict[str, Any]:
    """A baseline's choice and our expected speed-up over it, or why it has none."""
    from undercap.errors import UndercapError

    if why_not is not None:
        return {"available": False, "reason": why_not}
    try:
        base = make()
    except UndercapError as e:
        return {"available": False, "reason": str(e)}
    out: dict[str, Any] = {"available": True, **base.to_dict()}
    r = eff.relative.get(base.batch_size)
    if r is None:
        out["expected_speedup"] = None
        out["speedup_note"] = (
            f"batch size {base.batch_size} has no r(b) in the efficiency estimate "
            "(it never reached the target there): no finite time-to-accuracy to compare"
        )
    else:
        out["expected_speedup"] = base.time_per_sample_s * r / choice.score
    return out


# --- human summary -----------------------------------------------------------------
def _ms(t_s: float) -> str:
    return f"{t_s * 1e3:.4g} ms"


def format_summary(res: dict[str, Any]) -> str:
    sim = " (simulated device)" if res["simulated"] else ""
    lines = [
        f"{res['model']} on {res['device']}{sim}, power limit {res['power_limit_w']:g} W",
        f"  choice: batch size {res['batch_size']} at {res['freq_mhz']:g} MHz (Algorithm 1)",
        f"    time per sample {_ms(res['time_per_sample_s'])}; samples to target "
        f"{res['relative_samples']:.3g}x those of the largest batch "
        f"(score t*r {_ms(res['score'])})",
        f"    peak power {res['peak_power_w']:.2f} W of {res['power_limit_w']:g} W "
        f"({res['headroom_w']:.2f} W headroom)",
    ]
    if res["excluded_batch_sizes"]:
        lines.append("  excluded batch sizes:")
        lines += [f"    {x['batch_size']}: {x['reason']}" for x in res["excluded_batch_sizes"]]
    safe = res["safe_freq_mhz"]
    if safe is None:
        lines.append("  baselines: no safe frequency under this limit")
    else:
        lines.append(f"  baselines at the safe frequency {safe:g} MHz, {res['safe_freq_source']}")
    lines += _baseline_lines("baseline 1 (largest batch size)", res["baseline1"])
    lines += _baseline_lines(
        "baseline 2 (fastest on the proxy at that frequency)", res["baseline2"]
    )
    if res["simulated"]:
        lines.append("  note: the profile was measured on a simulated device")
    return "\n".join(lines)


def _baseline_lines(title: str, b: dict[str, Any]) -> list[str]:
    head = f"  {title}:"
    if not b["available"]:
        return [head, f"    unavailable: {b['reason']}"]
    lines = [
        head,
        f"    batch size {b['batch_size']} at {b['freq_mhz']:g} MHz, time per sample "
        f"{_ms(b['time_per_sample_s'])}, peak {b['peak_power_w']:.2f} W",
    ]
    if b["expected_speedup"] is None:
        lines.append(f"    {b['speedup_note']}")
    else:
        lines.append(
            f"    expected speed-up of the choice over it: {b['expected_speedup']:.2f}x "
            "(ratio of t*r)"
        )
    return lines
