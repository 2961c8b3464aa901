"""Figure of an efficiency estimate: accuracy vs samples per batch size, and r(b).

Left: test accuracy against training samples for every batch size (mean over seeds
as a line, each seed faint), with the target accuracy as a dashed line. Right: r(b)
= N(b) / N(b_max) as bars with the seed spread (min..max of the per-seed ratios) as
error bars; a batch size that never reached the target gets a hatched placeholder
bar marked "excluded", so it is visibly out of selection rather than silently gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Union

from undercap.artifacts.efficiency import Efficiency
from undercap.errors import require
from undercap.report.figures import new_figure, save_figure

_EXCLUDED = "excluded\n(no seed\nreached)"  # the placeholder bar's label


def _mean_curve(seed_curves: list[list[tuple[int, float]]]) -> tuple[list[int], list[float]]:
    """Mean accuracy at the evaluation points all seeds share (runs that stopped at
    the target are shorter; the mean covers the common prefix)."""
    xs: list[int] = []
    ys: list[float] = []
    for points in zip(*seed_curves):
        if any(p[0] != points[0][0] for p in points):
            break  # seeds evaluated at different sample counts: no common point
        xs.append(points[0][0])
        ys.append(sum(p[1] for p in points) / len(points))
    return xs, ys


def plot_efficiency(eff: Efficiency, path: Union[str, Path]) -> Path:
    """Write the two-panel figure to `path` (format from the suffix, e.g. .png)."""
    fig = new_figure(figsize=(11, 4.2))
    ax_c, ax_r = fig.subplots(1, 2)
    _plot_curves(ax_c, eff, require("matplotlib", "plot", "plotting").colormaps["plasma"])
    _plot_relative(ax_r, eff)
    kind = (eff.extra.get("target") or {}).get("accuracy_kind", "sample")
    fig.suptitle(
        f"{eff.model} on {eff.dataset}: target {'character ' if kind == 'character' else ''}"
        f"accuracy {eff.target_accuracy:.3f}"
    )
    fig.tight_layout()
    return save_figure(fig, path)


def _plot_curves(ax: Any, eff: Efficiency, cmap: Any) -> None:
    curves = {  # batch size -> one [(samples, accuracy), ...] per seed
        int(b_key): [[(int(p[0]), float(p[1])) for p in c] for c in per_seed.values()]
        for b_key, per_seed in (eff.extra.get("curves") or {}).items()
    }
    bs = sorted(curves)
    for i, b in enumerate(bs):
        color = cmap(0.85 * i / max(1, len(bs) - 1))  # the top of plasma is too pale
        for c in curves[b]:
            ax.plot([p[0] for p in c], [p[1] for p in c], color=color, alpha=0.25, lw=0.8)
        xs, ys = _mean_curve(curves[b])
        label = f"b={b}" + (" (excluded)" if b in eff.excluded_batch_sizes else "")
        ax.plot(xs, ys, color=color, lw=1.8, label=label)
    ax.axhline(eff.target_accuracy, color="k", ls="--", lw=1, label="target")
    ax.set_xlabel("training samples")
    ax.set_ylabel("test accuracy")
    ax.set_title("accuracy vs samples (faint: single seeds)")
    if not curves:
        ax.text(0.5, 0.5, "no curves in this artifact", ha="center", transform=ax.transAxes)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)


def _plot_relative(ax: Any, eff: Efficiency) -> None:
    bs = list(eff.batch_sizes)
    spread = eff.extra.get("relative_spread") or {}
    xs = list(range(len(bs)))
    top = max(list(eff.relative.values()) + [s.get("max", 0.0) for s in spread.values()])
    for x, b in zip(xs, bs):
        if b in eff.relative:
            r = eff.relative[b]
            s = spread.get(str(b))
            err = [[r - s["min"]], [s["max"] - r]] if s else None
            ax.bar(x, r, color="tab:blue", yerr=err, capsize=4)
            label_y = max(r, s["max"]) if s else r  # above the whisker, not on it
            ax.text(x, label_y + 0.01 * top, f"{r:.2f}", ha="center", va="bottom", fontsize=8)
        else:
            ax.bar(x, top, color="none", edgecolor="tab:red", hatch="//")
            ax.text(x, top / 2, _EXCLUDED, ha="center", va="center", fontsize=7, color="tab:red")
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    ax.set_xticks(xs, [str(b) for b in bs])
    ax.set_xlabel("batch size b")
    ax.set_ylabel("r(b) = N(b) / N(b_max)")
    ax.set_title("r(b) (whiskers: seed min..max)")
    ax.grid(alpha=0.3, axis="y")
