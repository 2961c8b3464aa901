# RESEARCH: runs only against undercap 0.2.0 (git commit b0ff734). The race on the target
# (undercap.select.race) was measured not to help and left undercap in 0.3.0; this is the
# replay as that release ran it, kept to read. It is not a script of its own: 0.2.0's
# benchmarks/matrix.py imports it (its `race` and `default` rows, `<modality>-race.csv`).
# To run it, check out the release, where it is benchmarks/matrix_race.py:
#
#   git checkout b0ff734 && .venv/bin/python benchmarks/matrix.py \
#       --estimates-from benchmarks/results/matrix --out /tmp/matrix-0.2.0
#
# (about 10 s, no training; `git checkout -` returns). Its stored output:
# benchmarks/results/research/matrix-0.2.0/ (README.md there).
"""The race on the target (undercap.select.race), replayed offline on the matrix's
stored learning curves (benchmarks/matrix.py --estimates-from; issue 25).

For every cell (device, limit, target; every other dataset of the modality as the
proxies) and every estimate seed s of the target:

* the plan: candidates and budget from the proxies alone (their median r(b) and the
  median of their N(b_max)), exactly as `undercap run` plans it;
* each candidate's fork is the target's recorded estimate run at its b with seed s
  (the same procedure the device runs: the starting weights, the sqrt-scaled learning
  rate, that data order), on the device's clock: evaluation k at samples n_k happens
  at device time t(b, f_b) * n_k. The race judges ONLY the evaluations within the
  budget (select.race.judge); the target's final N(b) is never looked at to judge;
* the cell's time: the losers' race time (select.race.race_cost) plus the winner's
  whole run t(b_w, f_w) * N_s(b_w), the race's share of it included (it continues
  from its fork), N_s the seed's own samples to target; averaged over the seeds
  (with a fixed winner this is t * mean N(b), what every other rule's cell uses).

No training: arithmetic on the stored artifacts and the profiles.
"""

from __future__ import annotations

import collections
import csv
import io
import statistics
from dataclasses import dataclass, replace

#: the default race `undercap run` applies (undercap.defaults.RACE_*); the grid beside it
DEFAULT = "default"


@dataclass(frozen=True)
class RaceParams:
    fraction: float  # budget per candidate, share of the favourite's predicted time
    candidates: int
    margin: float  # accuracy a challenger must beat the favourite by

    @property
    def label(self) -> str:
        return f"race k={self.candidates} {100 * self.fraction:g}% m={self.margin:g}"


def default_params() -> RaceParams:
    from undercap import defaults

    return RaceParams(defaults.RACE_FRACTION, defaults.RACE_CANDIDATES, defaults.RACE_MARGIN)


GRID = tuple(
    RaceParams(f, k, m) for k in (2, 3) for f in (0.02, 0.05, 0.1, 0.2, 0.3) for m in (0.0, 0.01)
)


def proxies_of(data: dict, target: str) -> tuple[dict, float]:
    """The proxies' r(b) and their median N(b_max) (what `run` knows before training)."""
    from undercap.select.ensemble import combined_relative

    proxies = {p: d["relative"] for p, d in data.items() if p != target}
    b_ref = max(combined_relative(proxies))
    n_max = [statistics.fmean(d["runs"][b_ref]) for p, d in data.items() if p != target]
    return proxies, statistics.median(n_max)


def replay(profile, lim, target: str, data: dict, curves: dict, params: RaceParams):  # type: ignore[no-untyped-def]
    """One cell's race for every seed of the target: [(verdict, plan, total_s, cost_s)]."""
    from undercap.select.race import judge, plan_race, race_cost, spent_in_race

    rel, n_max = proxies_of(data, target)
    plan = plan_race(profile, rel, lim, samples_bmax=n_max, fraction=params.fraction,
                     max_candidates=params.candidates, margin=params.margin)  # fmt: skip
    runs = data[target]["runs"]
    out = []
    for s in range(len(runs[max(runs)])):
        lanes = [[(c.time_per_sample_s * n, n, a) for n, a in curves[c.batch_size][s]]
                 for c in plan.candidates]  # fmt: skip
        if plan.needed:
            v = judge(lanes, data[target]["target_accuracy"], plan.budget_s, params.margin)
            cost = race_cost(v, spent_in_race(v, plan.budget_s, len(lanes)))
        else:
            v, cost = None, 0.0
        w = plan.candidates[0 if v is None else v.index]
        total = cost + w.time_per_sample_s * runs[w.batch_size][s]
        out.append((v, plan, total, cost))
    return out


def race_cells(
    profile, device_name, limits, data: dict, curves: dict, params: RaceParams, rule: str
):  # type: ignore[no-untyped-def]
    """Cells (proxy "others") of the race with `params`, and one detail row per seed."""
    from undercap.report.matrix import Cell, fastest

    cells, rows = [], []
    for lim in limits:
        for t in data:
            samples = {b: statistics.fmean(n) for b, n in data[t]["runs"].items()}
            best, best_s = fastest(profile, samples, lim)
            res = replay(profile, lim, t, data, curves[t], params)
            plan = res[0][1]
            wins = [plan.candidates[0 if v is None else v.index] for v, *_ in res]
            w = collections.Counter((c.batch_size, c.freq_mhz) for c in wins).most_common(1)[0][0]
            time_s = statistics.fmean(r[2] for r in res)
            cells.append(Cell("others", t, device_name, lim, rule, w[0], w[1], time_s,
                              best.batch_size, best.freq_mhz, best_s))  # fmt: skip
            true_s = {
                c.batch_size: c.time_per_sample_s * samples[c.batch_size] for c in plan.candidates
            }
            faster = min(true_s, key=true_s.get)
            clear = len(true_s) > 1 and max(true_s.values()) > 1.03 * min(true_s.values())
            for s, (v, p, total, cost) in enumerate(res):
                rows.append({"target": t, "device": device_name, "power_limit_w": lim, "seed": s,
                             "candidates": " ".join(str(c.batch_size) for c in p.candidates),
                             "budget_s": p.budget_s, "winner": wins[s].batch_size,
                             "why": "no race" if v is None else v.why, "race_cost_s": cost,
                             "total_s": total, "fastest_s": best_s,
                             "cost_pct_of_fastest": 100 * cost / best_s,
                             # the candidates' times differ by > 3%: did it pick the faster?
                             "right": (wins[s].batch_size == faster) if clear and v else None})  # fmt: skip
    return cells, rows


def curves_of(eff) -> dict[int, list[list[tuple[int, float]]]]:  # type: ignore[no-untyped-def]
    """b -> per seed, the recorded (samples, accuracy) evaluations of the estimate."""
    raw = eff.extra["curves"]
    return {int(b): [[(int(n), float(a)) for n, a in raw[b][s]] for s in sorted(raw[b], key=int)]
            for b in raw}  # fmt: skip


def with_targets(data: dict, effs: dict) -> dict:
    return {n: {**d, "target_accuracy": effs[n].target_accuracy} for n, d in data.items()}


def sweep_table(by_label: dict, ensemble_cells: list) -> str:
    """Worst and mean gap of every race setting in the grid, beside the median rule, and
    how often the race called the faster candidate where they differ by more than 3%."""
    lines = ["| rule | cells | oracle hits | mean gap | worst cell | race picked the faster "
             "(candidates > 3% apart; races) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for label, (cs, rows) in [
        ("ensemble (median, no race)", (ensemble_cells, [])),
        *by_label.items(),
    ]:
        worst = max(cs, key=lambda c: c.gap_pct)
        calls = [r["right"] for r in rows if r["right"] is not None]
        lines.append(f"| {label} | {len(cs)} | {sum(c.hit for c in cs)} "
                     f"| {statistics.fmean(c.gap_pct for c in cs):+.2f}% | {worst.gap_pct:+.1f}% "
                     f"({worst.device.split(':')[-1]} {worst.power_limit_w} W -> {worst.target}) "
                     f"| {f'{sum(calls)}/{len(calls)}' if rows else '-'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def rows_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def relabel(cells: list, rule: str) -> list:
    return [replace(c, rule=rule) for c in cells]
