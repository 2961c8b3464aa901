"""A fleet run's results folder, written atomically (artifacts/io.py): fleet.json (the
whole run, schema undercap.fleet/1), rounds.csv (one row per round), nodes.csv (one row
per node per round, with its headroom under its own cap), summary.md (also printed) and
fleet.png (docs/guides/fleet.md). Every output says when the devices were simulated.
Torch-free and Flower-free.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from undercap.artifacts.io import save_json, write_atomic
from undercap.fleet.records import FleetResult, NodeRound

SIM = "simulated devices: clocks, power and energy from undercap's device model"


def round_rows(result: FleetResult) -> List[Dict[str, Any]]:
    keys = ("round", "mode", "round_s", "fleet_time_s", "accuracy", "loss", "energy_j")
    return [
        {
            **{k: getattr(r, k) for k in keys},
            "idle_s": sum(n.idle_s for n in r.nodes),
            "nodes": len(r.nodes),
            "excluded": len(r.excluded),
            "effective_steps": r.effective_steps,
            "simulated": result.simulated,
        }
        for r in result.rounds
    ]


def node_rows(result: FleetResult) -> List[Dict[str, Any]]:
    rows = [n.to_dict() for r in result.rounds for n in r.nodes]
    for d in rows:
        cap = d["power_limit_w"]
        d["headroom_w"] = None if cap is None else cap - d["peak_power_w"]
    return rows


def to_csv(rows: List[Dict[str, Any]]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buf.getvalue()


def summary_text(result: FleetResult) -> str:
    s = result.summary()
    sim = f" ({SIM})" if result.simulated else ""
    nodes = result.fleet.get("nodes", [])
    lines = [
        f"# Fleet run: {result.config.get('model')} on {len(nodes)} nodes, plan {result.mode}{sim}",
        "",
    ]
    if result.reached:
        lines.append(
            f"Reached {result.target_accuracy:.1%} in {s['rounds_to_target']} rounds: "
            f"{s['time_to_target_s']:.2f} s of device time, {s['energy_to_target_j']:.1f} J "
            "(training plus waiting for the slowest node)."
        )
    else:
        lines.append(
            f"Did not reach {result.target_accuracy:.1%} in {len(result.rounds)} rounds "
            f"(final accuracy {s['final_accuracy']:.3f}); raise --max-rounds."
        )
    lines += [
        f"Idle time per round (summed over nodes): {s['idle_s_per_round']:.3f} s; "
        f"cap violations: {s['cap_violations']}.",
        "",
        "| node | device | cap (W) | b | f (MHz) | steps/round | peak (W) max | idle s/round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_node_line(result, n["name"]) for n in nodes]
    left_out = {e["name"]: e["reason"] for r in result.rounds for e in r.excluded}
    lines += [f"- {name} {why}" for name, why in sorted(left_out.items())]
    return "\n".join(lines) + "\n"


def _rounds_of(result: FleetResult, name: str) -> List[NodeRound]:
    return [n for r in result.rounds for n in r.nodes if n.name == name]


def _node_line(result: FleetResult, name: str) -> str:
    rs = _rounds_of(result, name)
    if not rs:
        return f"| {name} | | | | | | | left out |"
    last = rs[-1]
    cap = "none" if last.power_limit_w is None else f"{last.power_limit_w:g}"
    freq = "" if last.freq_mhz is None else f"{last.freq_mhz:g}"
    steps = sum(n.local_steps for n in rs) / len(rs)
    idle = sum(n.idle_s for n in rs) / len(rs)
    peak = max(n.peak_power_w for n in rs)
    return (
        f"| {name} | {last.device} | {cap} | {last.batch_size} | {freq} | {steps:.1f} | "
        f"{peak:.2f} | {idle:.3f} |"
    )


def write_results(
    result: FleetResult, out_dir: Union[str, Path], *, log: Any = None
) -> Dict[str, Path]:
    """The results folder (module docstring); the figure only with the plot extra."""
    out = Path(out_dir)
    paths = {
        "json": save_json(out / "fleet.json", result.to_dict()),
        "rounds": write_atomic(out / "rounds.csv", to_csv(round_rows(result))),
        "nodes": write_atomic(out / "nodes.csv", to_csv(node_rows(result))),
        "summary": write_atomic(out / "summary.md", summary_text(result)),
    }
    fig = plot_fleet(result, out / "fleet.png", log=log)
    if fig is not None:
        paths["figure"] = fig
    return paths


def plot_fleet(result: FleetResult, path: Union[str, Path], *, log: Any = None) -> Optional[Path]:
    """Three panels over rounds, one line per node: device time (the round's length
    dashed), idle time, and peak power as a fraction of the node's own cap."""
    from undercap.report.figures import save_figure

    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # the plot extra is optional
        if log:
            log(f"note: no fleet figure ({e})")
        return None
    fig = Figure(figsize=(11, 3.4))
    axes = fig.subplots(1, 3)
    for name in [n["name"] for n in result.fleet.get("nodes", [])]:
        rs = _rounds_of(result, name)
        x = [n.round for n in rs]
        share = [n.peak_power_w / n.power_limit_w if n.power_limit_w else float("nan") for n in rs]
        axes[0].plot(x, [n.device_time_s for n in rs], marker=".", label=name)
        axes[1].plot(x, [n.idle_s for n in rs], marker=".")
        axes[2].plot(x, share, marker=".")
    rounds = [r.round for r in result.rounds]
    axes[0].plot(rounds, [r.round_s for r in result.rounds], "k--", label="round")
    axes[2].axhline(1.0, color="r", lw=1)
    titles = ("device time per round (s)", "idle time (s)", "peak power / own cap")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("round")
    axes[0].legend(fontsize=6, ncol=2)
    sim = " - SIMULATED devices" if result.simulated else ""
    fig.suptitle(f"{result.config.get('model')}: fleet plan {result.mode}{sim}", fontsize=10)
    return save_figure(fig, path)
