"""Comparison tables and figures (paper Tables 2-4, time and energy bars).

Pure functions over `undercap.artifacts.comparison.Comparison` records: a Markdown
report, a per-run CSV and a summary CSV (report/compare_csv.py), and two bar charts.
Everything produced from a simulated device says "simulated" (Markdown title, a
`simulated` CSV column, figure titles). Files are written atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

from undercap.artifacts import write_atomic
from undercap.artifacts.comparison import (
    METHOD_LABELS,
    Comparison,
    SummaryRow,
    limit_label,
    limit_sort_key,
    summarize,
    summary_for,
)
from undercap.report.compare_csv import runs_csv, summary_csv


def _label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def _limits(c: Comparison) -> list[Optional[float]]:
    return sorted(c.power_limits_w, key=limit_sort_key)


# --- formatting -------------------------------------------------------------------------
def fmt_seconds(x: Optional[float]) -> str:
    if x is None:
        return "-"
    decimals = 0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2
    return f"{x:.{decimals}f}"


def fmt_mean_std(mean: Optional[float], std: Optional[float]) -> str:
    if mean is None:
        return "not reached"
    return fmt_seconds(mean) if std is None else f"{fmt_seconds(mean)} ± {fmt_seconds(std)}"


def fmt_speedup(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_gap(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _time_cell(row: Optional[SummaryRow]) -> str:
    if row is None or row.n_runs == 0:
        return "-"
    if row.n_over_limit and row.time_mean_s is None:  # every run failed the limit
        return f"over the limit ({row.n_over_limit}/{row.n_runs})"
    cell = fmt_mean_std(row.time_mean_s, row.time_std_s)
    if 0 < row.n_reached < row.n_runs:
        cell += f" ({row.n_reached}/{row.n_runs} reached)"
    if row.n_over_limit:  # failed runs: over the power limit (left out of the mean)
        cell += f" ({row.n_over_limit}/{row.n_runs} over the limit)"
    return cell


def _energy_cell(row: Optional[SummaryRow]) -> str:
    if row is None or row.n_runs == 0:
        return "-"
    return fmt_mean_std(row.energy_mean_j, row.energy_std_j)


def _config_cell(c: Comparison, method: str, limit: Optional[float]) -> str:
    ch = c.choice(method, limit)
    if ch is None:
        return "-"
    # mixed precision named; fp32 as before precisions (the paper's tables)
    precision = "" if ch.precision == "fp32" else f" {ch.precision}"
    return f"{ch.batch_size} @ {ch.freq_mhz:g} MHz{precision}"


# --- Markdown ------------------------------------------------------------------------
def title(c: Comparison, what: str = "Time") -> str:
    sim = " (simulated device)" if c.simulated else ""
    return f"{what} to accuracy: {c.model} on {c.device}{sim}"


def markdown_report(c: Comparison) -> str:
    """The comparison as Markdown: time-to-accuracy table with speed-ups and gap,
    chosen configurations, energy table, and notes on shared or unfinished runs."""
    rows = summarize(c)
    methods = c.methods
    labels = [_label(m) for m in methods]
    limits = _limits(c)
    n_seeds = len(c.seeds)
    lines = [
        f"## {title(c)}",
        "",
        f"Proxy `{c.proxy}` -> target `{c.target}`, target accuracy {c.target_accuracy:.3f}; "
        f"mean ± std over {n_seeds} seed{'s' if n_seeds != 1 else ''} of device training "
        "time to the target (s)"
        + (", measured on the simulated device's virtual clock." if c.simulated else "."),
        "",
        _table(
            ["Power limit", *labels, "Speed-up vs B1", "Speed-up vs B2", "Gap ours to oracle"],
            [
                [limit_label(lim)]
                + [_time_cell(summary_for(rows, m, lim)) for m in methods]
                + _ours_columns(rows, lim)
                for lim in limits
            ],
        ),
        "",
        "Chosen configuration (batch size @ GPU frequency"
        + (", in fp32 unless named" if any(ch.precision != "fp32" for ch in c.choices) else "")
        + "); the baselines run at the safe "
        "frequency, the highest at which no supported model exceeds the limit:",
        "",
        _table(
            ["Power limit", "Safe frequency", *labels],
            [
                [limit_label(lim), _safe_cell(c, lim)] + [_config_cell(c, m, lim) for m in methods]
                for lim in limits
            ],
        ),
        "",
        "Energy to the target (J), mean ± std:",
        "",
        _table(
            ["Power limit", *labels],
            [
                [limit_label(lim)] + [_energy_cell(summary_for(rows, m, lim)) for m in methods]
                for lim in limits
            ],
        ),
    ]
    notes = _notes(c, rows)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _ours_columns(rows: Sequence[SummaryRow], limit: Optional[float]) -> list[str]:
    ours = summary_for(rows, "ours", limit)
    if ours is None:
        return ["-", "-", "-"]
    return [
        fmt_speedup(ours.speedup_vs_baseline1),
        fmt_speedup(ours.speedup_vs_baseline2),
        fmt_gap(ours.gap_to_oracle_pct),
    ]


def _safe_cell(c: Comparison, limit: Optional[float]) -> str:
    for m in ("baseline1", "baseline2"):
        ch = c.choice(m, limit)
        if ch is not None and ch.safe_freq_mhz is not None:
            return f"{ch.safe_freq_mhz:g} MHz"
    return "-"


def _notes(c: Comparison, rows: Sequence[SummaryRow]) -> list[str]:
    notes = []
    shared = [r for r in c.runs if r.shared_from]
    if shared:
        notes.append(
            f"- {len(shared)} of {len(c.runs)} runs reuse an identical run "
            "(same batch size, frequency and seed chosen by another method or limit)."
        )
    for r in (r for r in rows if r.n_reached < r.n_runs):
        notes.append(
            f"- {_label(r.method)} at {limit_label(r.power_limit_w)}: {r.n_runs - r.n_reached} "
            f"of {r.n_runs} seeds did not reach the target within the sample budget "
            "(left out of the mean)."
        )
    for r in (r for r in rows if r.n_over_limit):
        notes.append(
            f"- {_label(r.method)} at {limit_label(r.power_limit_w)}: FAILED in "
            f"{r.n_over_limit} of {r.n_runs} seeds: the robust peak power went above the "
            "limit (left out of the mean)."
        )
    for r in (r for r in rows if r.guard_events):
        notes.append(
            f"- {_label(r.method)} at {limit_label(r.power_limit_w)}: the power guard stepped "
            f"the frequency down {r.guard_events} time(s)."
        )
    return notes


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(out)


# --- figures -------------------------------------------------------------------------
#: a bar chart's quantity: its SummaryRow mean and std fields and its axis label
_BARS = {
    "time": ("time_mean_s", "time_std_s", "time to accuracy (s)"),
    "energy": ("energy_mean_j", "energy_std_j", "energy to accuracy (J)"),
}


def plot_bars(c: Comparison, path: Union[str, Path], *, quantity: str = "time") -> Path:
    """Grouped bars per power limit, one bar per method, error bars = std over seeds.
    quantity: "time" (time to accuracy, s) or "energy" (energy to accuracy, J)."""
    from undercap.report.figures import new_figure, save_figure

    limits, methods = _limits(c), c.methods
    fig = new_figure(figsize=(1.6 + 1.6 * len(limits), 3.6))  # the plot extra: checked first
    if quantity not in ("time", "energy"):
        raise ValueError(f"quantity must be 'time' or 'energy', not {quantity!r}")
    mean_of, std_of, ylabel = _BARS[quantity]
    rows = summarize(c)
    width = 0.8 / max(len(methods), 1)
    ax = fig.subplots()
    for j, m in enumerate(methods):
        xs, ys, errs = [], [], []
        for i, lim in enumerate(limits):
            s = summary_for(rows, m, lim)
            mean = None if s is None else getattr(s, mean_of)
            if mean is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(mean)
            errs.append(getattr(s, std_of))
        # Error bars only where there is a spread (two or more seeds reached).
        yerr = [e or 0.0 for e in errs] if any(e is not None for e in errs) else None
        ax.bar(xs, ys, width, yerr=yerr, capsize=3, label=_label(m), color=f"C{j}")
    ax.set_xticks(range(len(limits)))
    ax.set_xticklabels([f"limit {limit_label(lim)}" for lim in limits])
    ax.set_ylabel(ylabel + (" [simulated]" if c.simulated else ""))
    ax.set_title(title(c, quantity.capitalize()), fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def plot_profile_choices(c: Comparison, profile: Any, out_dir: Union[str, Path]) -> dict[str, Path]:
    """The profile (paper Figure 1) once per finite limit, with ours starred and
    Baseline 1 at the comparison's safe frequency marked: profile_<limit>W.png."""
    from undercap.report.figures import plot_profile

    out: dict[str, Path] = {}
    for lim in _limits(c):
        ours, b1 = c.choice("ours", lim), c.choice("baseline1", lim)
        if lim is None or ours is None:
            continue
        path = Path(out_dir) / f"profile_{lim:g}W.png"
        out[f"profile_{lim:g}W"] = plot_profile(
            profile, path, power_limit_w=lim, choice=ours, baseline=b1
        )
    return out


def write_comparison_report(
    c: Comparison, out_dir: Union[str, Path], profile: Any = None
) -> dict[str, Path]:
    """Write comparison.md, runs.csv, summary.csv, the time and energy bars and,
    given the scenario's profile, one marked profile plot per limit into `out_dir`."""
    out = Path(out_dir)
    paths = {
        "markdown": write_atomic(out / "comparison.md", markdown_report(c)),
        "runs_csv": write_atomic(out / "runs.csv", runs_csv(c)),
        "summary_csv": write_atomic(out / "summary.csv", summary_csv(c)),
        "time_figure": plot_bars(c, out / "time_to_accuracy.png", quantity="time"),
        "energy_figure": plot_bars(c, out / "energy.png", quantity="energy"),
    }
    if profile is not None:
        paths.update(plot_profile_choices(c, profile, out))
    return paths
