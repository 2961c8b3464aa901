"""Benchmark: is r(b) estimated on the server from a small slice of the TARGET's own
training split good enough? Every target of both proxy-sensitivity matrices
(benchmarks/matrix.py), every simulated device and power limit the matrix has.

Per target: slices of 5, 10 and 25% of its training split (as the matrix loads it, its
`limit` included), slice seeds 0 and 1, plus the control `slice-100` (the whole training
split with its own 80/20 held-out part, slice seed 0); each estimated with the matrix's
model, batch sizes, budget, evaluation cadence, pre-trained weights and 3 seeds, every run
over the whole budget with dense evaluation (benchmarks/slice_cells.py: cached per run in
the matrix's cache, so an interrupted study resumes where it stopped). Target rules for the
slice, all from the same curves: `full` (the target's own absolute target), `plateau-x`
(x = 0.8, 0.9, 0.95 of the mean best accuracy of b_max's runs), `capped-0.95`
(min(full, 0.95 x plateau)). Each (target, device, limit, size, slice seed, rule) cell is the
matrix's (matrix_cells.make_cell): Algorithm 1 on the slice's r(b), timed with the target's
own N(b) from the matrix's full estimate, against the fastest feasible configuration.
Also the slice as ONE MORE proxy of the ensemble (the median r(b) over the other datasets
plus the slice), and what each slice estimate costs on the server beside a full proxy
estimate. The matrix's N(b) and r(b) are read from its stored estimates (--matrix).

    .venv/bin/python benchmarks/slice_study.py --jobs 2                 # everything (hours)
    .venv/bin/python benchmarks/slice_study.py --modalities image --datasets digits \\
        --sizes 5 --slice-seeds 0 --out /tmp/slice-smoke                  # a smoke run
    .venv/bin/python benchmarks/slice_study.py --estimates-from benchmarks/results/slice  # no training

Outputs (--out, default benchmarks/results/slice): study.md (the tables, printed too),
<modality>-slice-cells.csv (every cell: size, slice_seed, target_rule and the matrix's
cell columns), costs.csv (per slice estimate), efficiency/ (each slice estimate's artifact,
with its curves: every rule can be recomputed; `undercap select --efficiency` reads it).
The tables are rewritten after every estimate, so a running study's folder always holds
what is done so far.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import harness as H
import matrix as MX
import matrix_data as M
import slice_cells as SC

from undercap import defaults

#: the verdict's thresholds (the issue's, fixed before any result): per modality
GOAL_WORST = {"text": 3.0, "image": 5.0}
GOAL_MEAN = 1.0
GOAL_MAX_SIZE = 0.10
VARIANTS = ("slice", "ensemble+slice")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modalities", default="image,text", help="in this order (images first)")
    p.add_argument("--datasets", default=None, help="targets (comma-separated; default all)")
    p.add_argument("--sizes", default="5,10,25,100",
                   help="slice sizes in %% of the training split; 100 is the control (seed 0)")  # fmt: skip
    p.add_argument("--slice-seeds", default="0,1")
    p.add_argument("--jobs", type=int, default=2, help="parallel runs (1 thread each)")
    p.add_argument("--seeds", type=int, default=3, help="estimate seeds per slice (the matrix's 3)")
    p.add_argument("--estimates-from", type=Path, default=None, metavar="DIR",
                   help="no training: the slice estimates stored in DIR/efficiency/ (missing "
                   "ones are left out of the tables)")  # fmt: skip
    p.add_argument("--matrix", type=Path, default=H.RESULTS / "matrix",
                   help="the matrix's stored estimates (every dataset's N(b))")  # fmt: skip
    p.add_argument("--out", type=Path, default=H.RESULTS / "slice")
    p.add_argument("--data-dir", type=Path, default=H.DATA)
    p.add_argument("--cache-dir", type=Path, default=H.CACHE)
    p.add_argument("--devices", default=",".join(MX.DEVICES))
    p.add_argument("--cap-fractions", type=lambda s: [float(x) for x in s.split(",")],
                   default=[1 / 3, 2 / 3])  # fmt: skip
    return p.parse_args(argv)


def plan(sizes: list[float], seeds: list[int]) -> list[tuple[float, int]]:
    """(fraction, slice seed) in the order they are estimated: slice seed 0 first, the
    product's size first within a seed; the control (100%) with its seeds only."""
    order = sorted(sizes, key=lambda f: (f != defaults.SLICE_FRACTION, f))
    return [(f, s) for s in seeds for f in order if f < SC.CONTROL or s in SC.CONTROL_SEEDS]


def machine() -> str:
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


# --- one modality -----------------------------------------------------------------------------
class Modality:
    """The matrix's side of one modality (stored N(b), r(b), profiles) and its slice
    estimates so far."""

    def __init__(self, mod: M.Modality, args: argparse.Namespace, cache) -> None:  # type: ignore[no-untyped-def]
        self.mod, self.args = mod, args
        self.names = [n for n, d in M.DATASETS.items() if d.modality == mod.name
                      and (args.matrix / "efficiency" / f"{mod.name}-{n}.json").is_file()]  # fmt: skip
        wanted = None if args.datasets is None else set(args.datasets.split(","))
        self.targets = [n for n in self.names if wanted is None or n in wanted]
        self.effs, _ = MX.stored_estimates(mod, self.names, args.matrix)
        self.data = {}
        for n in self.names:
            runs = MX.usable(self.effs[n])
            self.data[n] = {"runs": runs, "relative": MX.relative_from(runs)[0]}
        margs = MX.parse_args(["--data-dir", str(args.data_dir), "--devices", args.devices])
        margs.cap_fractions = args.cap_fractions
        self.sides = {d: MX.device_side(mod, d, margs, cache, self.names)
                      for d in args.devices.split(",")}  # fmt: skip
        self.slices: dict[tuple[str, float, int], object] = {}
        self.matrix_cells = self._matrix_cells()

    def _matrix_cells(self) -> list:
        cells: list = []
        for device, (profile, limits) in self.sides.items():
            cells += MX.cells_for(profile, device, limits, self.data)
            cells += MX.ensemble_cells(profile, device, limits, self.data, rules=("ensemble",))
        return [c for c in cells if c.proxy != c.target and c.target in self.targets]

    def rows(self) -> list[dict]:
        """Every cell of every slice estimate so far, each target rule, both variants."""
        out = []
        for (t, f, s), eff in sorted(self.slices.items(), key=lambda kv: kv[0]):
            curves, _ = SC.curves_of(eff)
            full = M.DATASETS[t].target_accuracy
            samples = SC.target_samples(self.data[t]["runs"])
            others = {p: d["relative"] for p, d in self.data.items() if p != t}
            for rule in SC.TARGET_RULES:
                thr = SC.threshold(rule, curves, full)
                rel = SC.relative(curves, rule, full)
                label = SC.slice_label(f, s)
                for device, (profile, limits) in self.sides.items():
                    single = SC.cells(profile, device, limits, rel, samples, proxy=label,
                                      target=t, rule="slice")  # fmt: skip
                    ens = SC.cells(profile, device, limits, rel, samples,
                                   proxy=f"{MX.OTHERS}+{label}", target=t, rule="ensemble+slice",
                                   choose=SC.ensemble_choice(others))  # fmt: skip
                    for c in single + ens:
                        out.append({"size": SC.pct(f), "slice_seed": s, "target_rule": rule,
                                    **c.to_dict(), "threshold": thr,
                                    "usable_b": " ".join(str(b) for b in sorted(rel or {})),
                                    "note": getattr(c, "why", "")})  # fmt: skip
        return out


# --- tables -----------------------------------------------------------------------------------
def _fmt_gap(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.2f}%"


def summary(rows: list[dict]) -> dict:
    """cells, no-r(b) cells, hits, within 3%, mean gap (cells with a choice), worst."""
    n = len(rows)
    filled = [r for r in rows if math.isfinite(r["gap_pct"])]
    worst = max(rows, key=lambda r: r["gap_pct"]) if rows else None
    return {
        "cells": n,
        "none": n - len(filled),
        "hits": sum(bool(r["hit"]) for r in rows),
        "within3": sum(r["gap_pct"] <= 3.0 + 1e-9 for r in rows),
        "mean": statistics.fmean(r["gap_pct"] for r in filled) if filled else math.inf,
        "worst": worst["gap_pct"] if worst else math.nan,
        "where": ""
        if worst is None
        else f"{worst['device'].split(':')[-1]} "
        f"{MX._lim(worst['power_limit_w'])}: {worst['proxy']} -> {worst['target']}",
    }


def _row(label: str, s: dict) -> list:
    n = s["cells"]
    none = f"{s['none']}" if s["none"] else "0"
    worst = "n/a" if s["none"] else f"{s['worst']:+.1f}% ({s['where']})"
    return [label, n, none, f"{s['hits']} ({100 * s['hits'] / n:.0f}%)",
            f"{s['within3']} ({100 * s['within3'] / n:.0f}%)", _fmt_gap(s["mean"]), worst]  # fmt: skip


HEAD = ["rule", "cells", "no r(b)", "oracle hits", "within 3%", "mean gap", "worst cell"]


def cell_dicts(cells) -> list[dict]:  # type: ignore[no-untyped-def]
    return [c.to_dict() for c in cells]


def results_table(m: Modality, rows: list[dict], sizes: list[str]) -> str:
    """Per size x target rule, each variant: the off-diagonal summary, beside the matrix's
    paper and ensemble rows over the same targets."""
    done = {r["target"] for r in rows}  # like for like: the targets with slice cells
    matrix = [c for c in cell_dicts(m.matrix_cells) if c["target"] in done]
    of = f"; targets {', '.join(sorted(done))}"
    out = [_row(f"matrix: paper (one other dataset as the proxy{of})",
                summary([c for c in matrix if c["rule"] == "paper"])),
           _row(f"matrix: ensemble (every other dataset, median r(b){of})",
                summary([c for c in matrix if c["rule"] == "ensemble"]))]  # fmt: skip
    for variant in VARIANTS:
        for size in sizes:
            for rule in SC.TARGET_RULES:
                cs = [r for r in rows if r["rule"] == variant and r["size"] == size
                      and r["target_rule"] == rule]  # fmt: skip
                if cs:
                    name = f"{variant}: {size}%, {rule}" + (
                        " (product)" if _is_product(size, rule) else ""
                    )
                    out.append(_row(name, summary(cs)))
    return H.md_table(HEAD, out) + "\n"


def _is_product(size: str, rule: str) -> bool:
    return size == SC.pct(defaults.SLICE_FRACTION) and rule == SC.product_rule()


def per_target_table(rows: list[dict], sizes: list[str]) -> str:
    """Per target, the product's target rule: each size's worst cell over devices, limits
    and slice seeds."""
    rule = SC.product_rule()
    targets = sorted({r["target"] for r in rows})
    out = []
    for t in targets:
        line = [t]
        for size in sizes:
            cs = [r for r in rows if r["rule"] == "slice" and r["size"] == size
                  and r["target_rule"] == rule and r["target"] == t]  # fmt: skip
            line.append("" if not cs else f"{sum(bool(r['hit']) for r in cs)}/{len(cs)}, "
                        f"{_fmt_gap(max(r['gap_pct'] for r in cs))}")  # fmt: skip
        out.append(line)
    return H.md_table(["target", *[f"{s}%: hits, worst" for s in sizes]], out) + "\n"


def cost_rows(m: Modality) -> list[dict]:
    """Per slice estimate: its sizes, the study's whole-budget cost, what the product's
    estimate would cost under each target rule, and the same target's full proxy estimate."""
    out = []
    controls = {t: eff for (t, f, s), eff in m.slices.items() if f == SC.CONTROL}
    for (t, f, s), eff in sorted(m.slices.items(), key=lambda kv: kv[0]):
        sl = eff.extra["slice"]
        whole = SC.whole_cost(eff)
        per = SC.per_sample_wall(controls[t]) if t in controls else None
        full = SC.full_cost(m.effs[t], per)
        row = {"modality": m.mod.name, "dataset": t, "size": SC.pct(f), "slice_seed": s,
               "n_train": sl["n_train"], "n_held_out": sl["n_held_out"],
               "eval_items": sl["eval_items"], "runs": len(sl["runs"]),
               "whole_samples": whole["samples"], "whole_wall_s": whole["wall_s"],
               "elapsed_s": sl["elapsed_s"], "ran_runs": sl["ran_runs"],
               "reused_runs": sl["reused_runs"]}  # fmt: skip
        for rule in SC.TARGET_RULES:
            pc = SC.product_cost(eff, rule)
            row[f"product_{rule}_samples"] = pc["samples"]
            row[f"product_{rule}_wall_s"] = pc["wall_s"]
        row.update(full_samples=full["samples"], full_wall_s_stored=full["wall_s"],
                   full_wall_s_here=full["wall_s_here"])  # fmt: skip
        out.append(row)
    return out


def _full_wall(r: dict) -> float:
    """The full proxy's wall time to compare with: on this machine (the control's wall
    per sample) where the control is done, else the matrix's stored one."""
    return r["full_wall_s_here"] if r["full_wall_s_here"] is not None else r["full_wall_s_stored"]


def cost_table(costs: list[dict], sizes: list[str]) -> str:
    out = []
    for size in sizes:
        cs = [r for r in costs if r["size"] == size]
        if not cs:
            continue

        def mean(k: str, cs: list[dict] = cs) -> float:
            return statistics.fmean(r[k] for r in cs)

        prod = SC.product_rule()
        ratio = [r[f"product_{prod}_wall_s"] / _full_wall(r) for r in cs]
        here = sum(r["full_wall_s_here"] is not None for r in cs)
        out.append([f"{size}%", len(cs), f"{min(r['n_train'] for r in cs)}-{max(r['n_train'] for r in cs)}",
                    f"{min(r['eval_items'] for r in cs)}-{max(r['eval_items'] for r in cs)}",
                    f"{mean('whole_samples'):,.0f}", f"{mean('whole_wall_s') / 60:.1f} min",
                    _elapsed(cs),
                    f"{mean(f'product_{prod}_samples'):,.0f}",
                    f"{mean(f'product_{prod}_wall_s') / 60:.1f} min",
                    f"{mean('full_samples'):,.0f}", f"{mean('full_wall_s_stored') / 60:.1f} min",
                    f"{statistics.fmean(ratio):.2f} (max {max(ratio):.2f}; {here}/{len(cs)} here)"])  # fmt: skip
    head = ["size", "estimates", "train items", "eval items", "study: samples (whole budget)",
            "study: run time (summed)", "study: elapsed (2 jobs)",
            f"product ({SC.product_rule()}): samples", "product: run time (summed, pro rata)",
            "full proxy: samples", "full proxy: run time (stored)",
            "product / full proxy run time"]  # fmt: skip
    return H.md_table(head, out) + "\n"


def _elapsed(cs: list[dict]) -> str:
    """Mean elapsed time of the estimates that trained (a fully cached one has none)."""
    xs = [r["elapsed_s"] for r in cs if r["elapsed_s"] is not None]
    return f"{statistics.fmean(xs) / 60:.1f} min ({len(xs)})" if xs else "n/a (cached)"


def cost_ratio(costs: list[dict], size: str, rule: str) -> float | None:
    cs = [r for r in costs if r["size"] == size]
    if not cs:
        return None
    return statistics.fmean(r[f"product_{rule}_wall_s"] / _full_wall(r) for r in cs)


def verdict(m: Modality, rows: list[dict], costs: list[dict], sizes: list[str]) -> tuple[str, set]:
    """Which size x rule meets the goal (fixed before the results): worst cell <= 3% (text)
    / 5% (images), mean gap <= 1%, a slice of at most 10%, and the product's estimate on
    the slice no more server time than the same target's full proxy estimate (mean ratio
    of summed run time over the estimates). Only complete sets (every target and seed)."""
    goal = GOAL_WORST.get(m.mod.name, 3.0)
    n_full = len(m.targets)
    out, ok = [], set()
    for variant in VARIANTS:
        for size in sizes:
            if float(size) / 100 > GOAL_MAX_SIZE + 1e-12:
                continue
            for rule in SC.TARGET_RULES:
                cs = [r for r in rows if r["rule"] == variant and r["size"] == size
                      and r["target_rule"] == rule]  # fmt: skip
                if not cs:
                    continue
                s = summary(cs)
                done = len({(r["target"], r["slice_seed"]) for r in cs})
                complete = done == n_full * len(m.args.slice_seed_list)
                ratio = cost_ratio(costs, size, rule)
                cheap = ratio is not None and ratio <= 1.0 and variant == "slice"
                good = (
                    s["none"] == 0 and s["worst"] <= goal + 1e-9 and s["mean"] <= GOAL_MEAN + 1e-9
                )
                if good and cheap and complete:
                    ok.add((variant, size, rule))
                out.append([f"{variant}: {size}%, {rule}", f"{_fmt_gap(s['worst'])}",
                            _fmt_gap(s["mean"]),
                            "n/a (the other datasets' estimates too)" if variant != "slice"
                            else f"{ratio:.2f}",
                            f"{done}/{n_full * len(m.args.slice_seed_list)}",
                            "**yes**" if (good and cheap and complete) else
                            ("yes so far" if good and cheap else "no")])  # fmt: skip
    head = ["size, rule", f"worst (goal <= {goal:g}%)", f"mean (goal <= {GOAL_MEAN:g}%)",
            "server time / full proxy (goal <= 1)", "(target, seed) done", "meets"]  # fmt: skip
    return H.md_table(head, out) + "\n", ok


# --- driver -----------------------------------------------------------------------------------
def write_all(mods: list[Modality], args: argparse.Namespace, command: str, started: float) -> str:
    sizes = [SC.pct(f) for f in sorted(args.size_list)]
    md = [
        "# r(b) from a slice of the target's own training split",
        "",
        "```bash",
        *_commands(args, command),
        "```",
        "",
        f"Machine: {machine()} (shared with other work: wall times are upper bounds). "
        f"undercap defaults: SLICE_FRACTION = {defaults.SLICE_FRACTION}, "
        f"SLICE_TARGET_FRACTION = {defaults.SLICE_TARGET_FRACTION} (rule `{SC.product_rule()}`). "
        f"Matrix estimates from `{_rel(args.matrix)}`; slice estimates "
        + (
            f"stored in `{_rel(args.estimates_from)}`."
            if args.estimates_from
            else f"trained here (cache `{args.cache_dir}`)."
        ),  # fmt: skip
        "",
        "Every cell: Algorithm 1 on the slice's r(b) (rule `slice`), or on the median r(b) over "
        "the other datasets plus the slice (`ensemble+slice`), timed with the target's own N(b) "
        "from the matrix, against the fastest feasible (b, f) (matrix_cells.py). Hits: the "
        'matrix\'s oracle hit (time equal to the fastest, relative 1e-9). "no r(b)": cells '
        "where the target rule leaves no batch size with every seed reaching it (the product "
        "would stop with an error): they count as misses and make the worst cell n/a. "
        "slice-100 (the control: the whole training split, 80/20) shows the noise floor.",
        "",
    ]
    ok_all: dict[str, set] = {}
    all_costs = []
    for m in mods:
        rows = m.rows()
        costs = cost_rows(m)
        all_costs += costs
        if rows:
            H.write_csv(args.out / f"{m.mod.name}-slice-cells.csv", rows)
        done = sorted({(t, SC.pct(f), s) for (t, f, s) in m.slices})
        total = len(m.targets) * len(args.plan)
        which = f" ({stored(done)})" if len(done) < total else ""
        md += [f"## {m.mod.name}: {m.mod.model}; targets {', '.join(m.targets)}", "",
               f"Slice estimates done: {len(done)} of {total}{which}.", ""]  # fmt: skip
        if not rows:
            continue
        md += ["Off-diagonal cells over every device, limit (and slice seed):", "",
               results_table(m, rows, sizes),
               f"Per target, target rule {SC.product_rule()}, rule `slice` (hits, worst cell over "
               "devices, limits and slice seeds):", "", per_target_table(rows, sizes),
               "Server cost per slice estimate (means over the estimates; run time = summed wall "
               "time of the runs, two at a time; the product's estimate stops every run but "
               "b_max's at its target, its time pro rata of the whole-budget run's; the ratio's "
               "full proxy run time is this machine's (the control's wall per sample x the full "
               "estimate's samples per b) where the target's control is done, else the "
               "matrix's stored one):", "", cost_table(costs, sizes),
               "Verdict (goal: worst cell <= 3% text / 5% images, mean <= 1%, a slice of at most "
               "10%, no more server time than one full proxy estimate):", ""]  # fmt: skip
        table, ok = verdict(m, rows, costs, sizes)
        ok_all[m.mod.name] = ok
        md += [table]
    if len(ok_all) > 1:
        both = set.intersection(*ok_all.values())
        md += ["Meets the goal in every modality: "
               + (", ".join(f"{v} {s}% {r}" for v, s, r in sorted(both)) or "none") + "."]  # fmt: skip
    if all_costs:
        H.write_csv(args.out / "costs.csv", all_costs)
    md += ["", f"({time.perf_counter() - started:.0f} s in all)"]
    text = "\n".join(md) + "\n"
    H.write_text(args.out / "study.md", text)
    return text


def _commands(args: argparse.Namespace, command: str) -> list[str]:
    """The command that made these tables; from stored estimates, the training one
    before it (resumable: it trains only what is not cached)."""
    if args.estimates_from is None:
        return [command]
    train = f".venv/bin/python benchmarks/slice_study.py --modalities {args.modalities} --jobs 2"
    return [f"{train}   # trains what is not cached yet", command]


def stored(done: list[tuple[str, str, int]]) -> str:
    """Which estimates a partial study holds: each target's sizes, per slice seed."""
    by: dict[tuple[str, int], list[str]] = {}
    for t, size, s in done:
        by.setdefault((t, s), []).append(size)
    return "; ".join(
        f"{t} seed {s}: {', '.join(f'{x}%' for x in sorted(sizes, key=float))}"
        for (t, s), sizes in sorted(by.items())
    )


def _rel(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(H.REPO))
    except ValueError:
        return str(p)


def main(argv: list[str] | None = None) -> int:
    from undercap.artifacts.cache import Cache
    from undercap.artifacts.efficiency import save_efficiency

    args = parse_args(argv)
    args.size_list = [float(x) / 100 for x in args.sizes.split(",") if x.strip()]
    args.slice_seed_list = [int(x) for x in args.slice_seeds.split(",") if x.strip()]
    args.plan = plan(args.size_list, args.slice_seed_list)
    if args.estimates_from is None and not H.have_data(args.data_dir):
        return 0
    started = time.perf_counter()
    command = ".venv/bin/python benchmarks/slice_study.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    cache = Cache(args.cache_dir)
    mods: list[Modality] = []
    for name in [s.strip() for s in args.modalities.split(",") if s.strip()]:
        mod = M.MODALITIES[name]
        m = Modality(mod, args, cache)
        mods.append(m)
        weights = None
        if args.estimates_from is None:
            weights = M.pretrained_weights(mod, args.data_dir, cache)
            _check_weights(m, weights)
        todo = [(f, s, t) for f, s in args.plan for t in m.targets]
        for i, (f, s, t) in enumerate(todo, 1):
            if args.estimates_from is not None:
                eff = SC.load_slice_estimate(args.estimates_from, mod.name, t, f, s)
                if eff is None:
                    print(
                        f"  {mod.name} {t} {SC.slice_label(f, s)}: not stored, left out",
                        file=sys.stderr,
                    )
                    continue
            else:
                clock = H.stopwatch()
                eff = SC.slice_estimate(M.DATASETS[t], args.data_dir, weights, f, s,
                                        cache_root=args.cache_dir, jobs=args.jobs,
                                        seeds=range(args.seeds))  # fmt: skip
                sl = eff.extra["slice"]
                print(f"  [{i}/{len(todo)}] {mod.name} {t} {SC.slice_label(f, s)}: {clock():.0f} s "
                      f"(ran {sl['ran_runs']}, reused {sl['reused_runs']} runs; "
                      f"{sl['n_train']} train / {sl['n_held_out']} held out)",
                      file=sys.stderr, flush=True)  # fmt: skip
                eff = _keep_first_timing(eff, SC.artifact_path(args.out, mod.name, t, f, s))
                save_efficiency(SC.artifact_path(args.out, mod.name, t, f, s), eff)
            m.slices[(t, f, s)] = eff
            if args.estimates_from is None:
                write_all(mods, args, command, started)
    text = write_all(mods, args, command, started)
    print(text)
    return 0


def _keep_first_timing(eff, path: Path):  # type: ignore[no-untyped-def]
    """A resumed study finds an estimate's runs cached (it ran none): keep the elapsed
    time and run counts of the call that trained them, stored in `path` before."""
    from undercap.artifacts.efficiency import Efficiency, load_efficiency

    if eff.extra["slice"]["ran_runs"] or not path.is_file():
        return eff
    old = load_efficiency(path).extra.get("slice", {})
    if not old.get("ran_runs"):
        return eff
    keep = {k: old[k] for k in ("elapsed_s", "ran_runs", "reused_runs")}
    extra = dict(eff.extra, slice={**eff.extra["slice"], **keep})
    return Efficiency(eff.model, eff.dataset, eff.target_accuracy, eff.samples_to_target,
                      eff.relative, extra)  # fmt: skip


def _check_weights(m: Modality, weights: str | None) -> None:
    """Say so where the pre-trained weights made here differ from the matrix's (their
    files differ by their metadata's time stamps: compared by what pre-training reached)."""
    import torch

    if weights is None:
        return
    meta = torch.load(weights, map_location="cpu", weights_only=False)["meta"]
    here = (meta["accuracy"], meta["samples_trained"])
    stored = set()
    for n in m.names:
        wm = m.effs[n].extra.get("init", {}).get("weights_meta", {})
        stored.add((wm.get("accuracy"), wm.get("samples_trained")))
    if stored != {here}:
        print(f"note: {m.mod.name} pre-trained weights reach {here}, the matrix's {sorted(stored)}",
              file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
