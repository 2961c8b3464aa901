"""The proxy-sensitivity matrix (paper Sec. 5.4, Figs. 5 and 6): how much longer
training on a target T takes with the (b, f) chosen from a proxy P's r(b) than with
the fastest configuration on T, per device and power limit.

A cell (P, T, device, limit, rule):

    (b, f)   = rule(profile, r_P, limit)            e.g. Algorithm 1 (select_ours)
    time     = t(b, f) * N_T(b)                      Eq. 2 with the target's measured N(b)
    fastest  = min over feasible (b, f) of t(b, f) * N_T(b)   (brute force, every row)
    gap      = 100 * (time / fastest - 1) %

t(b, f) and the feasibility (peak power plus the row's safety margin <= limit, as
select.core decides it) come from the device's profile,
N_T(b) is the target's mean samples-to-target over its seeds. A cell "hits" the
oracle when its time equals the fastest (relative 1e-9). Pure arithmetic on
artifacts plus one figure function (matplotlib imported inside it).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from undercap.artifacts.profile import Profile, ProfileRow
from undercap.errors import InfeasibleError
from undercap.select import ensemble as E

HIT_RTOL = 1e-9


@dataclass(frozen=True)
class Cell:
    proxy: str
    target: str
    device: str
    power_limit_w: float | None
    rule: str
    batch_size: int
    freq_mhz: float
    time_s: float  # t(b, f) * N_T(b) on the device's (simulated) clock
    fastest_batch_size: int
    fastest_freq_mhz: float
    fastest_time_s: float

    @property
    def gap_pct(self) -> float:
        return 100.0 * (self.time_s / self.fastest_time_s - 1.0)

    @property
    def hit(self) -> bool:
        return self.time_s <= self.fastest_time_s * (1 + HIT_RTOL)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gap_pct": self.gap_pct, "hit": self.hit}


def _feasible(profile: Profile, samples: Mapping[int, float], limit: float | None) -> list:
    """Rows selection would call feasible: peak + the row's safety margin within the
    limit (select.core.margin_of), and an N(b) on the target."""
    from undercap.select.core import margin_of

    return [
        r
        for r in profile.rows
        if r.batch_size in samples and (limit is None or r.peak_power_w + margin_of(r) <= limit)
    ]


def fastest(
    profile: Profile, samples_target: Mapping[int, float], power_limit_w: float | None
) -> tuple[ProfileRow, float]:
    """The fastest feasible configuration on the target and its time, over EVERY
    profile row (not only each b's highest clock); ties prefer larger b, higher f."""
    rows = _feasible(profile, samples_target, power_limit_w)
    if not rows:
        raise InfeasibleError(f"no configuration of {profile.model} is feasible under the limit")
    best = min(
        rows,
        key=lambda r: (
            r.time_per_sample_s * samples_target[r.batch_size],
            -r.batch_size,
            -r.freq_mhz,
        ),
    )
    return best, best.time_per_sample_s * samples_target[best.batch_size]


def make_cell(
    profile: Profile,
    choice: Any,  # a select.Choice (batch_size, freq_mhz)
    samples_target: Mapping[int, float],
    *,
    proxy: str,
    target: str,
    device: str,
    power_limit_w: float | None,
    rule: str,
) -> Cell:
    row = next(
        r
        for r in profile.rows
        if r.batch_size == choice.batch_size and r.freq_mhz == choice.freq_mhz
    )
    best, best_time = fastest(profile, samples_target, power_limit_w)
    return Cell(
        proxy=proxy,
        target=target,
        device=device,
        power_limit_w=power_limit_w,
        rule=rule,
        batch_size=row.batch_size,
        freq_mhz=row.freq_mhz,
        time_s=row.time_per_sample_s * samples_target[row.batch_size],
        fastest_batch_size=best.batch_size,
        fastest_freq_mhz=best.freq_mhz,
        fastest_time_s=best_time,
    )


@dataclass(frozen=True)
class Summary:
    """One (device, limit, rule) over its cells."""

    device: str
    power_limit_w: float | None
    rule: str
    cells: int
    hits: int
    within_3pct: int
    worst_gap_pct: float
    worst: str  # "proxy -> target"
    mean_gap_pct: float

    @property
    def hit_share(self) -> float:
        return self.hits / self.cells if self.cells else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_share": self.hit_share}


def summarize(
    cells: Iterable[Cell], *, off_diagonal: bool = True, group_limits: bool = False
) -> list[Summary]:
    """Per (device, limit, rule) (or per (device, rule) with group_limits): cells,
    oracle hits, cells within 3%, the worst cell and the mean gap. The diagonal
    (proxy = target) is left out by default: it is the oracle by construction."""
    groups: dict[tuple, list[Cell]] = {}
    for c in cells:
        if off_diagonal and c.proxy == c.target:
            continue
        lim = "all" if group_limits else c.power_limit_w
        groups.setdefault((c.device, lim, c.rule), []).append(c)
    out = []
    for (device, lim, rule), cs in groups.items():
        worst = max(cs, key=lambda c: c.gap_pct)
        out.append(
            Summary(
                device=device,
                power_limit_w=None if lim == "all" else lim,
                rule=rule,
                cells=len(cs),
                hits=sum(c.hit for c in cs),
                within_3pct=sum(c.gap_pct <= 3.0 + 1e-9 for c in cs),
                worst_gap_pct=worst.gap_pct,
                worst=f"{worst.proxy} -> {worst.target}"
                + ("" if not group_limits else f" @ {_limit(worst.power_limit_w)}"),
                mean_gap_pct=sum(c.gap_pct for c in cs) / len(cs),
            )
        )
    return out


def _limit(w: float | None) -> str:
    return "none" if w is None else f"{w:g} W"


def grid(cells: Sequence[Cell], names: Sequence[str]) -> list[list[float | None]]:
    """gap % as rows = proxies, columns = targets, in `names` order (None: no cell)."""
    at = {(c.proxy, c.target): c.gap_pct for c in cells}
    return [[at.get((p, t)) for t in names] for p in names]


def colour_scale_max(panels: Sequence[tuple[str, Sequence[Cell]]]) -> float:
    """The top of the colour bar: the largest gap in any panel, rounded up to a
    multiple of 5 (at least 5), so that no cell is darker than the bar can show."""
    gaps = [c.gap_pct for _, cells in panels for c in cells if math.isfinite(c.gap_pct)]
    return max(5.0, 5.0 * math.ceil(max(gaps, default=0.0) / 5.0))


def plot_matrix(
    panels: Sequence[tuple[str, Sequence[Cell]]],
    names: Sequence[str],
    path: str | Path,
    *,
    title: str,
    vmax_pct: float | None = None,
    cols: int = 4,
) -> Path:
    """Heatmaps like the paper's Figs. 5 and 6: one panel per (title, cells), rows
    the proxy, columns the target, colour and number the % increase over the
    fastest configuration; `cols` panels per row (e.g. the limits of one device).
    The colour bar runs from 0 to `vmax_pct` (None: from the data, colour_scale_max)."""
    from undercap.errors import require

    require("matplotlib", "plot", "plotting")
    from matplotlib.figure import Figure

    from undercap.report.figures import save_figure

    vmax_pct = colour_scale_max(panels) if vmax_pct is None else vmax_pct
    cols = max(1, min(len(panels), cols))
    rows = (len(panels) + cols - 1) // cols
    n = len(names)
    fig = Figure(figsize=(2.2 + 0.62 * n * cols, 0.9 + 0.62 * n * rows))
    for i, (label, cells) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        g = grid(cells, names)
        data = [[float("nan") if v is None else v for v in row] for row in g]
        im = ax.imshow(data, cmap="Reds", vmin=0.0, vmax=vmax_pct)
        for p in range(n):
            for t in range(n):
                if g[p][t] is not None:
                    v = g[p][t]
                    ax.text(
                        t,
                        p,
                        f"{v:.0f}" if v >= 0.5 else "0",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if v > 0.6 * vmax_pct else "black",
                    )
        ax.set_xticks(range(n), names, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(n), names if i % cols == 0 else [""] * n, fontsize=7)
        ax.set_title(label, fontsize=8)
        if i % cols == 0:
            ax.set_ylabel("proxy", fontsize=8)
        ax.set_xlabel("target", fontsize=8)
    fig.subplots_adjust(hspace=0.55)  # room for the x labels above the next row's titles
    fig.colorbar(im, ax=fig.axes, shrink=0.8, label="% time-to-accuracy over the fastest")
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


# --- the ensemble rule's controls (the matrix measures them beside it) ----------------------
def select_mean(
    profile: Any,
    proxies: E.Proxies,
    power_limit_w: float | None,
    *,
    margin_w: float | None = None,
) -> E.Ensemble:
    """Control: Algorithm 1 on the mean over the proxies of r(b)."""
    return E._ranked(profile, proxies, power_limit_w, margin_w, statistics.fmean, "ensemble-mean")


def select_minimax(
    profile: Any,
    proxies: E.Proxies,
    power_limit_w: float | None,
    *,
    margin_w: float | None = None,
) -> E.Ensemble:
    """Control: the candidate with the smallest worst regret over the proxies; ties
    (within E.TIE_TOL) by the smaller mean regret, then the larger b, the higher f."""
    rel = E._checked(proxies)
    cands, regrets = E.regret_table(profile, rel, power_limit_w, margin_w=margin_w)
    if not cands:  # Algorithm 1's own error: what is infeasible and the lowest power
        E._select(profile, E.combined_relative(rel), power_limit_w, E.OURS, margin_w)
    idx = range(len(cands))
    worst = [max(r[i] for r in regrets.values()) for i in idx]
    mean = [math.fsum(r[i] for r in regrets.values()) / len(regrets) for i in idx]
    tied = [i for i in idx if worst[i] <= min(worst) + E.TIE_TOL]
    i = min(tied, key=lambda j: (mean[j], -cands[j].batch_size, -cands[j].freq_mhz))
    chosen = dataclasses.replace(cands[i], method="ensemble-minimax")
    views = E._views(profile, rel, chosen, power_limit_w, margin_w)
    return E.Ensemble(chosen, views, E.combined_relative(rel))
