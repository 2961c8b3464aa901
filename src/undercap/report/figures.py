"""Figures of undercap's artifacts and results. matplotlib is imported inside the
plotting functions (the Agg canvas, no pyplot state), so importing this module stays
cheap; every figure is written atomically (a temp file, then os.replace).
"""

from pathlib import Path
from typing import Any, Optional, Union

from undercap.artifacts.io import atomic_path
from undercap.artifacts.profile import Profile
from undercap.errors import require


def new_figure(**kwargs: Any) -> Any:
    """A matplotlib Figure (no pyplot state); MissingExtraError without the plot extra."""
    require("matplotlib", "plot", "plotting")
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def save_figure(fig: Any, path: Union[str, Path], *, dpi: int = 120) -> Path:
    """Render a matplotlib Figure with the Agg canvas and save it atomically; the
    format comes from the suffix (png when there is none)."""
    require("matplotlib", "plot", "plotting")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight")
    return Path(path)


# --- the profile: time per sample vs peak power (the paper's Figure 1) ---------------
def plot_profile(
    profile: Profile,
    path: Union[str, Path],
    *,
    power_limit_w: Optional[float] = None,
    choice: Any = None,
    baseline: Any = None,
) -> Path:
    """The paper's Figure 1 for one profile: x = peak power (W), y = time per sample
    (s, log), one colour per batch size with its points joined in frequency order;
    the region above the power limit shaded; the selected configuration starred and
    the baseline marked (each a select.Choice or anything with its fields, e.g. a
    comparison's ChoiceRecord). Returns the written path."""
    fig = new_figure(figsize=(7.5, 5.0))
    ax = fig.add_subplot()
    cmap = require("matplotlib", "plot", "plotting").colormaps["viridis"]
    bs = profile.batch_sizes
    for i, b in enumerate(bs):
        rows = sorted((r for r in profile.rows if r.batch_size == b), key=lambda r: r.freq_mhz)
        colour = cmap(i / max(1, len(bs) - 1) * 0.9)
        xs, ys = [r.peak_power_w for r in rows], [r.time_per_sample_s for r in rows]
        ax.plot(xs, ys, marker="o", ms=4, lw=1.2, color=colour, label=str(b))
    peaks = [r.peak_power_w for r in profile.rows]
    x_hi = max(peaks + ([power_limit_w] if power_limit_w else [])) * 1.08
    x_lo = min(peaks) * 0.92
    if power_limit_w is not None:
        ax.axvspan(power_limit_w, x_hi, color="tab:red", alpha=0.12, lw=0)
        ax.axvline(power_limit_w, color="tab:red", ls="--", lw=1.2)
        label = f" limit {power_limit_w:g} W (right: infeasible)"
        xaxis = ax.get_xaxis_transform()  # x in data, y in axes units: above the plot
        ax.text(
            power_limit_w, 1.0, label, color="tab:red", transform=xaxis, va="bottom", fontsize=8
        )
    for c, marker, colour in ((baseline, "D", "tab:gray"), (choice, "*", "gold")):
        if c is not None:
            _mark(ax, c, marker, colour)
    ax.set_xlim(x_lo, x_hi)
    ax.set_yscale("log")
    ax.set_xlabel("peak power (W)")
    ax.set_ylabel("time per sample (s)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(
        title="batch size (points: low to high MHz)", fontsize=8, title_fontsize=8, loc="best"
    )
    sim = " (simulated)" if profile.simulated else ""
    ax.set_title(f"{profile.model} on {profile.device.get('name', 'unknown device')}{sim}", pad=14)
    return save_figure(fig, path)


def _mark(ax: Any, c: Any, marker: str, colour: str) -> None:
    names = {"baseline1": "baseline 1", "baseline2": "baseline 2"}
    name = names.get(c.method, c.method)
    ax.scatter(
        [c.peak_power_w],
        [c.time_per_sample_s],
        marker=marker,
        s=260 if marker == "*" else 90,
        color=colour,
        edgecolors="black",
        linewidths=0.9,
        zorder=5,
    )
    ax.annotate(
        f"{name}: b={c.batch_size}, {c.freq_mhz:g} MHz"
        + ("" if c.relative_samples is None else f", r={c.relative_samples:.2f}"),
        (c.peak_power_w, c.time_per_sample_s),
        xytext=(8, 8),
        textcoords="offset points",
        fontsize=8,
        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "alpha": 0.8, "lw": 0},
        zorder=6,
    )
