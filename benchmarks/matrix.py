"""Benchmark: the proxy-sensitivity matrix (paper Sec. 5.4, Figs. 5 and 6) on the
SIMULATED Jetson Nano and TX2 NX, for the paper's selection rule with one proxy and the
ensemble rule with several.

Text: the char transformer (context 32) pre-trained on WikiText-2, over tiny
Shakespeare, Austen, Chesterton, Milton and Whitman. Images: the small CNN (3x32x32,
seeded random init) over the two CIFAR-10 quarters, MNIST and the bundled digits.
Settings and targets: benchmarks/matrix_data.py. Each dataset's N(b) is estimated
ONCE with several seeds (undercap.estimate; finished runs live in the one cache, so
a re-run costs nothing) and serves as proxy and as target. Every cell (proxy,
target, device, limit, rule) is matrix_cells.py's: the rule's (b, f) from
the proxy's r(b) and the profile, timed with the target's N(b), against the fastest
feasible configuration on the target. Profiles of the simulated devices come from
the device model (no host compute). Limits: the binding caps compare.py derives
(fractions of the way from the lowest limit every supported model can meet to the
model's unconstrained peak) plus no limit.

Rules: paper = Algorithm 1 on the proxy's mean r(b). Several proxies
(undercap.select.ensemble): each target with every other dataset of its modality as the
proxies (proxy "others"): ensemble = Algorithm 1 on the median r(b), with the mean and
minimax regret as controls; default = what `undercap run` does with several proxies
(the ensemble rule). --estimates-from DIR recomputes every cell from a previous run's
stored estimates, without training.

r(b) from a slice of the TARGET's own training split (benchmarks/slice_cells.py: whole-budget
dense runs of the slice, cached, so its target is computed from its curves): rule `slice` is
the product's defaults (defaults.SLICE_FRACTION, the slice's target the dataset's own,
capped at defaults.SLICE_TARGET_FRACTION of the mean best accuracy of its largest batch:
`undercap run --proxy-slice`), `slice-<pct>`
each size studied (5, 10, 25 and the control 100: the whole training split with its own 80/20
held-out part) at the same target rule; one row per target, device, limit and slice seed
(proxy column "slice-s<seed>"; the control has seed 0 only), after every other row of the
cells file. With --estimates-from they come from stored slice estimates
(DIR/efficiency/<modality>-<name>-slice<pct>-s<seed>.json, or --slice-estimates-from's);
those not stored (a study under way) have no rows, and the tables say how many of the planned
estimates they hold; --no-slices leaves them all out (and every output as it was before), as
does a stored run without slice estimates. The whole study (every size, seed and target
rule): benchmarks/slice_study.py.

The spread rule, the noise-scale rules (gns-target, gns-transfer, gns-proxy) and the
race on the target were measured not to help and left undercap in 0.3.0; their cells,
and the command that makes them with release 0.2.0, are in
benchmarks/results/research/matrix-0.2.0/.

    .venv/bin/python benchmarks/matrix.py                      # everything
    .venv/bin/python benchmarks/matrix.py --modalities image --jobs 2
    .venv/bin/python benchmarks/matrix.py --estimates-from benchmarks/results/matrix --out /tmp/mx \
        --slice-estimates-from benchmarks/results/slice        # or --no-slices
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

import harness as H
import matrix_cells as MC
import matrix_data as M

RULES = ("paper",)
#: Several proxies (select/ensemble.py): each target with EVERY OTHER dataset of its
#: modality as the proxies (proxy column "others"). ensemble = Algorithm 1 on the median
#: r(b) over the proxies (the rule); ensemble-mean and ensemble-minimax (the smallest
#: worst regret over the proxies) are controls for the choice of the median.
ENSEMBLE_RULES = ("ensemble", "ensemble-mean", "ensemble-minimax")
#: what `undercap run` does with these proxies: the ensemble rule (its own rows, so that
#: the table keeps the product's choice apart from the rule it is today)
DEFAULT = "default"
ALL_RULES = (*RULES, *ENSEMBLE_RULES, DEFAULT)
OTHERS = "others"
#: r(b) from a slice of the target's own training split (slice_cells.py): `slice` = the
#: product's defaults, `slice-<pct>` each size studied, both at the product's target rule
SLICE = "slice"
SLICE_PCTS = (5, 10, 25, 100)
DEVICES = ("sim:jetson-nano", "sim:jetson-tx2nx")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=H.DATA)
    p.add_argument("--cache-dir", type=Path, default=H.CACHE)
    p.add_argument("--out", type=Path, default=H.RESULTS / "matrix")
    p.add_argument("--modalities", default="text,image")
    p.add_argument("--datasets", default=None, help="only these (comma-separated; default all)")
    p.add_argument("--devices", default=",".join(DEVICES))
    p.add_argument("--seeds", type=int, default=3, help="estimate seeds per dataset (>= 3)")
    p.add_argument("--jobs", type=int, default=2, help="parallel estimate runs (1 thread each)")
    p.add_argument("--cap-fractions", type=lambda s: [float(x) for x in s.split(",")],
                   default=[1 / 3, 2 / 3])  # fmt: skip
    p.add_argument("--estimates-from", type=Path, default=None, metavar="DIR",
                   help="no training: every dataset's N(b) from DIR/efficiency/<modality>-<name>.json "
                   "(a previous run's --out)")  # fmt: skip
    p.add_argument("--no-slices", action="store_true",
                   help="leave out the slice rules (slice, slice-<pct>): no slice estimates")  # fmt: skip
    p.add_argument("--slice-seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1],
                   help="slice seeds of the slice rules (the control slice-100: seed 0 only)")  # fmt: skip
    p.add_argument("--slice-estimates-from", type=Path, default=None, metavar="DIR",
                   help="with --estimates-from: the stored slice estimates from "
                   "DIR/efficiency/<modality>-<name>-slice<pct>-s<seed>.json (default: the "
                   "--estimates-from DIR; benchmarks/results/slice holds the study's)")  # fmt: skip
    return p.parse_args(argv)


# --- measuring each dataset once ------------------------------------------------------------
def estimate_all(mod: M.Modality, names: list[str], args, cache, weights):  # type: ignore[no-untyped-def]
    from undercap.estimate import estimate

    effs = {}
    for name in names:
        cfg = M.estimate_config(M.DATASETS[name], args.data_dir, weights, range(args.seeds))
        # dense curves: the stored artifacts keep every curve point (the replays in
        # benchmarks/research/ read them; issue 34: the sparse schedule keeps only the
        # points it evaluated), and dense keeps the cache keys of the runs made so far
        cfg = dataclasses.replace(cfg, eval_schedule="dense")
        elapsed = H.stopwatch()
        effs[name] = estimate(cfg, cache_dir=cache.root, jobs=args.jobs, torch_device="cpu",
                              progress=False, threads=1, log=lambda _m: None)  # fmt: skip
        print(f"  {name}: N(b) estimated ({elapsed():.0f} s)", file=sys.stderr)
    return effs


def stored_estimates(mod: M.Modality, names: list[str], src: Path):  # type: ignore[no-untyped-def]
    """Each dataset's efficiency artifact as a previous run stored it (--estimates-from),
    and that run's estimate time: the cells are arithmetic on these and the profiles, so
    they are recomputed exactly without training. (Files of undercap 0.2.0 also hold each
    dataset's noise scale; nothing reads it now.)"""
    from undercap.artifacts.efficiency import load_efficiency

    effs = {n: load_efficiency(src / "efficiency" / f"{mod.name}-{n}.json") for n in names}
    stored = json.loads((src / f"{mod.name}-datasets.json").read_text())
    return effs, stored.get("estimate_s")


def usable(eff) -> dict[int, list[int]]:  # type: ignore[no-untyped-def]
    """b -> per-seed N(b), only for batch sizes where EVERY seed reached the target
    (a run cut off by the budget must not decide a ranking)."""
    return {b: list(runs) for b, runs in eff.samples_to_target.items()
            if all(n is not None for n in runs)}  # fmt: skip


def relative_from(runs: dict[int, list[int]], seed_index: int | None = None):  # type: ignore[no-untyped-def]
    """r(b) = N(b) / N(b_ref) from the mean over seeds (or one seed's runs), b_ref the
    largest usable batch size; and the per-seed spread the estimate artifact keeps."""
    b_ref = max(runs)
    if seed_index is not None:
        return {b: n[seed_index] / runs[b_ref][seed_index] for b, n in runs.items()}, None
    n_ref = statistics.fmean(runs[b_ref])
    rel = {b: statistics.fmean(n) / n_ref for b, n in runs.items()}
    spread = {}
    for b, n in runs.items():
        per = [x / n_ref for x in n]
        spread[b] = {"std": statistics.stdev(per) if len(per) > 1 else 0.0,
                     "min": min(per), "max": max(per), "n": len(per)}  # fmt: skip
    return rel, spread


# --- the device side --------------------------------------------------------------------------
def device_side(mod: M.Modality, device_name: str, args, cache, names):  # type: ignore[no-untyped-def]
    """The model's profile on the simulated device and the derived caps (+ none)."""
    from compare import derived_caps

    from undercap.devices import open_device
    from undercap.recipes.baselines import safe_profiles
    from undercap.recipes.common import model_input, profile_model

    spec = M.data_spec(M.DATASETS[names[0]], args.data_dir)
    inp = model_input(mod.model, spec)
    quiet = lambda _m: None  # noqa: E731
    with open_device(device_name) as device:
        profile = profile_model(device, mod.model, inp.shape, mod.batch_sizes,
                                num_classes=inp.num_classes, cache=cache, host_steps=False,
                                progress=False, log=quiet, task=inp.task)  # fmt: skip
        others = safe_profiles(device, profile, cache=cache, progress=False, log=quiet)
    caps = derived_caps(device_name, profile, others, args.cap_fractions)
    return profile, [*caps, None]


# --- cells --------------------------------------------------------------------------------------
def cells_for(profile, device_name, limits, data: dict):  # type: ignore[no-untyped-def]
    """The paper's rule (Algorithm 1 on the proxy's mean r(b)) for every proxy -> target."""
    from matrix_cells import make_cell

    from undercap.select import select_ours

    cells = []
    for lim in limits:
        for p, proxy in data.items():
            choice = select_ours(profile, proxy["relative"], lim)
            for t, target in data.items():
                samples = {b: statistics.fmean(n) for b, n in target["runs"].items()}
                cells.append(make_cell(profile, choice, samples, proxy=p, target=t,
                                       device=device_name, power_limit_w=lim, rule="paper"))  # fmt: skip
    return cells


def ensemble_cells(profile, device_name, limits, data: dict, rules=ENSEMBLE_RULES):  # type: ignore[no-untyped-def]
    """Each target with every other dataset as the proxies (leave the target out)."""
    from matrix_cells import make_cell

    from undercap.select import ensemble as E

    how = {"ensemble": E.select_ensemble, "ensemble-mean": MC.select_mean,
           "ensemble-minimax": MC.select_minimax}  # fmt: skip
    cells = []
    for lim in limits:
        for t, target in data.items():
            proxies = {p: d["relative"] for p, d in data.items() if p != t}
            samples = {b: statistics.fmean(n) for b, n in target["runs"].items()}
            for rule in rules:
                c = how[rule](profile, proxies, lim).choice
                cells.append(make_cell(profile, c, samples, proxy=OTHERS, target=t,
                                       device=device_name, power_limit_w=lim, rule=rule))  # fmt: skip
    return cells


def default_cells(ens: list) -> list:  # type: ignore[type-arg]
    """The `default` rule's cells: what `undercap run` does with several proxies, the
    ensemble rule (the median)."""
    return [dataclasses.replace(c, rule=DEFAULT) for c in ens if c.rule == "ensemble"]


def one_seed_cells(profile, device_name, limits, data: dict, seeds: int):  # type: ignore[no-untyped-def]
    """The paper's rule with r(b) from a single estimate seed of the proxy."""
    from matrix_cells import make_cell

    from undercap.select import select_ours

    out = {s: [] for s in range(seeds)}
    for s in range(seeds):
        for lim in limits:
            for p, proxy in data.items():
                rel, _ = relative_from(proxy["runs"], s)
                choice = select_ours(profile, rel, lim)
                for t, target in data.items():
                    samples = {b: statistics.fmean(n) for b, n in target["runs"].items()}
                    out[s].append(make_cell(profile, choice, samples, proxy=p, target=t,
                                            device=device_name, power_limit_w=lim, rule="paper-1seed"))  # fmt: skip
    return out


# --- r(b) from a slice of the target (slice_cells.py) ----------------------------------------
def slice_rules() -> tuple[str, ...]:
    return (SLICE, *[f"slice-{p}" for p in SLICE_PCTS])


def slice_plan(args) -> dict[str, tuple[float, list[int]]]:  # type: ignore[no-untyped-def]
    """rule -> (slice fraction, slice seeds); the control (100%) has seed 0 only."""
    import slice_cells as SC

    from undercap import defaults

    plan = {SLICE: (float(defaults.SLICE_FRACTION), list(args.slice_seeds))}
    for p in SLICE_PCTS:
        f = p / 100
        seeds = [s for s in args.slice_seeds if f < SC.CONTROL or s in SC.CONTROL_SEEDS]
        plan[f"slice-{p}"] = (f, seeds)
    return plan


def slice_estimates(mod: M.Modality, names: list[str], args, cache, weights) -> dict:  # type: ignore[no-untyped-def]
    """(name, fraction, slice seed) -> the slice estimate (slice_cells.slice_estimate:
    trained through the cache, or stored: --estimates-from)."""
    import slice_cells as SC

    wanted = sorted({(f, s) for f, seeds in slice_plan(args).values() for s in seeds})
    out = {}
    src = args.slice_estimates_from or args.estimates_from
    for name in names:
        for f, s in wanted:
            if args.estimates_from is not None:
                eff = SC.load_slice_estimate(src, mod.name, name, f, s)
                if eff is None:  # not stored (yet): its rows are left out, and the tables say so
                    continue
            else:
                elapsed = H.stopwatch()
                eff = SC.slice_estimate(M.DATASETS[name], args.data_dir, weights, f, s,
                                        cache_root=cache.root, jobs=args.jobs,
                                        seeds=range(args.seeds))  # fmt: skip
                print(
                    f"  {name}: {SC.slice_label(f, s)} estimated ({elapsed():.0f} s)",
                    file=sys.stderr,
                )
            out[(name, f, s)] = eff
    planned = len(names) * len(wanted)
    if len(out) < planned:
        print(f"  {planned - len(out)} of {planned} slice estimates not stored in {src}/efficiency: "
              "their rows are left out (benchmarks/slice_study.py stores them)", file=sys.stderr)  # fmt: skip
    return {"estimates": out, "planned": planned} if out else {}


def slice_cells_for(profile, device_name, limits, data: dict, slices: dict, args) -> list:  # type: ignore[no-untyped-def]
    """Each target with r(b) from a slice of its own training split, at the product's
    target rule (slice_cells.product_rule)."""
    import slice_cells as SC

    cells = []
    for rule, (f, seeds) in slice_plan(args).items():
        for t, target in data.items():
            samples = SC.target_samples(target["runs"])
            for s in [s for s in seeds if (t, f, s) in slices]:  # a partial study: what is stored
                rel = SC.eff_relative(slices[(t, f, s)], SC.product_rule())
                cells += SC.cells(profile, device_name, limits, rel, samples,
                                  proxy=f"slice-s{s}", target=t, rule=rule)  # fmt: skip
    return cells


def _slices_stored(slices: dict) -> str:
    n, planned = len(slices["estimates"]), slices["planned"]
    if n == planned:
        return ""
    return f"; {n} of the {planned} slice estimates stored, the rest left out"


def _hits_worst(cs: list) -> str:
    """Hits over cells and the worst gap; blank where a rule has no cells (a size not stored yet)."""
    if not cs:
        return ""
    return f"{sum(c.hit for c in cs)}/{len(cs)}, {max(c.gap_pct for c in cs):+.1f}%"


def slice_table(cells) -> str:  # type: ignore[no-untyped-def]
    """Per target, every device and limit: hits and the worst cell of each slice rule."""
    rules = slice_rules()
    rows = []
    for t in sorted({c.target for c in cells if c.rule in rules}):
        row = [t]
        for r in rules:
            cs = [c for c in cells if c.rule == r and c.target == t]
            row.append(_hits_worst(cs))
        rows.append(row)
    return H.md_table(["target", *[f"{r}: hits, worst" for r in rules]], rows) + "\n"


# --- tables and figures -----------------------------------------------------------------------
def _lim(w: float | None) -> str:
    return "none" if w is None else f"{w:g} W"


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def summary_table(cells, one_seed: dict, rules=ALL_RULES) -> str:  # type: ignore[no-untyped-def]
    """Per device and limit: oracle-hit share and worst cell for each rule, and the
    paper's rule from one estimate seed (mean +- std over the seeds)."""
    from matrix_cells import summarize

    by = {(s.device, s.power_limit_w, s.rule): s for s in summarize(cells)}
    seeds = {
        s: {(x.device, x.power_limit_w): x for x in summarize(cs)} for s, cs in one_seed.items()
    }
    head = ["device", "limit", *[f"{r}: hits, worst" for r in rules], "paper, 1 seed: hits, worst"]
    rows = []
    for device, lim in sorted(
        {(k[0], k[1]) for k in by}, key=lambda k: (k[0], k[1] is None, k[1] or 0)
    ):
        row = [f"{device} (simulated)", _lim(lim)]
        for r in rules:
            s = by[(device, lim, r)]
            row.append(f"{s.hits}/{s.cells}, {s.worst_gap_pct:+.1f}% ({s.worst})")
        hs = [seeds[x][(device, lim)].hit_share * 100 for x in seeds]
        ws = [seeds[x][(device, lim)].worst_gap_pct for x in seeds]
        row.append(
            f"{statistics.fmean(hs):.0f} +- {_sd(hs):.0f}%, {statistics.fmean(ws):+.1f} +- {_sd(ws):.1f}%"
        )
        rows.append(row)
    return H.md_table(head, rows) + "\n"


def overall_table(cells, rules=ALL_RULES) -> str:  # type: ignore[no-untyped-def]
    from matrix_cells import summarize

    rows = []
    for r in rules:
        cs = [c for c in cells if c.rule == r and c.proxy != c.target]
        s = summarize([*cs], group_limits=True)
        n = sum(x.cells for x in s)
        hits, w3 = sum(x.hits for x in s), sum(x.within_3pct for x in s)
        worst = max(s, key=lambda x: x.worst_gap_pct)
        mean = statistics.fmean(c.gap_pct for c in cs)
        rows.append([r, n, f"{hits} ({100 * hits / n:.0f}%)", f"{w3} ({100 * w3 / n:.0f}%)",
                     f"{mean:+.2f}%", f"{worst.worst_gap_pct:+.1f}% ({worst.device}: {worst.worst})"])  # fmt: skip
    head = ["rule", "cells", "oracle hits", "within 3%", "mean gap", "worst cell"]
    return H.md_table(head, rows) + "\n"


def ensemble_table(cells, effs: dict) -> str:  # type: ignore[no-untyped-def]
    """Per target (every device and limit): the worst cell of the paper's rule with each
    single proxy and with its best one, against the several-proxy rules; and what the
    proxies cost on the server (samples trained and summed run time of the estimates)."""
    heads = ["target", "proxies", "paper, worst single proxy", "paper, best single proxy",
             *[f"{r}: hits, worst" for r in ENSEMBLE_RULES], "server: samples (x one proxy)",
             "server: run time (summed)"]  # fmt: skip
    rows = []
    for t in effs:
        proxies = [p for p in effs if p != t]
        paper = [c for c in cells if c.rule == "paper" and c.target == t and c.proxy != t]
        per_proxy = {p: max(c.gap_pct for c in paper if c.proxy == p) for p in proxies}
        worst_p, best_p = max(per_proxy, key=per_proxy.get), min(per_proxy, key=per_proxy.get)
        row = [t, ", ".join(proxies), f"{per_proxy[worst_p]:+.1f}% ({worst_p})",
               f"{per_proxy[best_p]:+.1f}% ({best_p})"]  # fmt: skip
        for r in ENSEMBLE_RULES:
            cs = [c for c in cells if c.rule == r and c.target == t]
            row.append(_hits_worst(cs))
        samples = [effs[p].extra["cost"]["samples_trained"] for p in proxies]
        wall = sum(effs[p].extra["cost"]["wall_s"] for p in proxies)
        row += [f"{sum(samples):,} ({sum(samples) / statistics.median(samples):.1f})",
                f"{wall / 60:.0f} min"]  # fmt: skip
        rows.append(row)
    return H.md_table(heads, rows) + "\n"


def dataset_table(data: dict, mod: M.Modality) -> str:
    bs = list(mod.batch_sizes)
    rows = []
    for name, d in data.items():
        sp, rel = d["spread"], d["relative"]
        cells = [f"{rel[b]:.2f} +- {sp[b]['std']:.2f}" if b in rel else "excl." for b in bs]
        rows.append([name, M.DATASETS[name].target_accuracy, d["reached"], *cells])
    head = ["dataset", "target", "reached", *[f"r({b})" for b in bs]]
    return H.md_table(head, rows, fmt=[None, "{:.2f}"]) + "\n"


def figures(cells, names, mod: M.Modality, out: Path, rules=RULES) -> list[Path]:  # type: ignore[no-untyped-def]
    from matrix_cells import plot_matrix

    paths = []
    for rule in rules:
        panels = []
        for device in sorted({c.device for c in cells}):
            lims = sorted(
                {c.power_limit_w for c in cells if c.device == device},
                key=lambda w: (w is None, w or 0),
            )
            for lim in lims:
                cs = [
                    c
                    for c in cells
                    if c.rule == rule and c.device == device and c.power_limit_w == lim
                ]
                panels.append((f"{device.split(':')[-1]} (simulated), {_lim(lim)}", cs))
        path = out / f"{mod.name}-{rule}.png"
        title = (f"{mod.name}: {mod.model}, rule '{rule}': % time-to-accuracy over the fastest "
                 "configuration (simulated devices)")  # fmt: skip
        per_device = len(panels) // max(1, len({c.device for c in cells}))
        paths.append(plot_matrix(panels, names, path, title=title, cols=per_device))
    return paths


# --- one modality -------------------------------------------------------------------------------
def run_modality(mod: M.Modality, args, cache) -> dict | None:  # type: ignore[no-untyped-def]
    wanted = None if args.datasets is None else set(args.datasets.split(","))
    names = [n for n, d in M.DATASETS.items() if d.modality == mod.name
             and (wanted is None or n in wanted)
             and all((args.data_dir / f).is_file() for f in d.needs)]  # fmt: skip
    missing = [n for n, d in M.DATASETS.items() if d.modality == mod.name and n not in names
               and (wanted is None or n in wanted)]  # fmt: skip
    if missing:
        print(f"{mod.name}: skipped datasets without data: {missing}")
    if len(names) < 2:
        return None
    elapsed = H.stopwatch()
    print(f"== {mod.name}: {names}", file=sys.stderr)
    weights = None
    if args.estimates_from is not None:
        effs, t_est = stored_estimates(mod, names, args.estimates_from)
    else:
        weights = M.pretrained_weights(mod, args.data_dir, cache)
        effs = estimate_all(mod, names, args, cache, weights)
        t_est = elapsed()
    slices = {} if args.no_slices else slice_estimates(mod, names, args, cache, weights)
    data = {}
    for name in names:
        runs = usable(effs[name])
        rel, spread = relative_from(runs)
        n_all = len(effs[name].samples_to_target) * args.seeds
        reached = sum(n is not None for r in effs[name].samples_to_target.values() for n in r)
        data[name] = {"runs": runs, "relative": rel, "spread": spread,
                      "reached": f"{reached}/{n_all}"}  # fmt: skip
    cells, one_seed, sliced = [], {s: [] for s in range(args.seeds)}, []
    for device_name in args.devices.split(","):
        profile, limits = device_side(mod, device_name, args, cache, names)
        ens = ensemble_cells(profile, device_name, limits, data)
        cells += cells_for(profile, device_name, limits, data) + ens + default_cells(ens)
        for s, c1 in one_seed_cells(profile, device_name, limits, data, args.seeds).items():
            one_seed[s] += c1
        if slices:
            sliced += slice_cells_for(profile, device_name, limits, data, slices["estimates"], args)
    # the slice rules' rows after every other row: the earlier rows stay byte for byte
    return {"mod": mod, "names": names, "data": data, "cells": cells + sliced,
            "one_seed": one_seed, "estimate_s": t_est, "effs": effs, "slices": slices}  # fmt: skip


def write_modality(res: dict, out: Path) -> str:
    from undercap.artifacts.efficiency import save_efficiency

    mod, cells = res["mod"], res["cells"]
    present = {c.rule for c in cells}  # a partial slice study may leave a size without rows
    rules = ALL_RULES + tuple(r for r in slice_rules() if r in present)
    md = [f"## {mod.name}: {mod.model}, datasets {', '.join(res['names'])}", "",
          dataset_table(res["data"], mod), "Overall (off-diagonal cells, every device and limit):", "",
          overall_table(cells, rules), "Per device and limit (hits = cells choosing the fastest configuration; "
          "worst = the largest % over the fastest, proxy -> target):", "",
          summary_table(cells, res["one_seed"]),
          f"Several proxies (rule `ensemble`, src/undercap/select/ensemble.py; proxy column "
          f"\"{OTHERS}\" in the cells CSV; rule `{DEFAULT}` is what `undercap run` does with several "
          "proxies: the ensemble rule): each target with every other dataset as the proxies, "
          "per target over every device and limit. Server: samples the proxies' estimates "
          "trained (and as a multiple of one proxy's, their median), and the summed wall time "
          "of their runs (single-threaded runs, two at a time on this machine):", "",
          ensemble_table(cells, res["effs"])]  # fmt: skip
    if res["slices"]:
        import slice_cells as SC

        from undercap import defaults

        md += [f"r(b) from a slice of each target's own training split (benchmarks/slice_cells.py; "
               f"proxy column \"slice-s<seed>\"): rule `{SLICE}` is the product's defaults (a "
               f"{100 * defaults.SLICE_FRACTION:g}% slice, target rule {SC.product_rule()}), "
               f"`slice-<pct>` each size at that target rule (slice-100: the whole training split, "
               "the control). Per target over every device, limit and slice seed "
               f"(the whole study: benchmarks/results/slice/){_slices_stored(res['slices'])}:",
               "", slice_table(cells)]  # fmt: skip
    H.write_csv(out / f"{mod.name}-cells.csv", [c.to_dict() for c in cells])
    obj = {"datasets": {n: {"runs": {str(b): v for b, v in d["runs"].items()},
                            "relative": {str(b): v for b, v in d["relative"].items()},
                            "reached": d["reached"]} for n, d in res["data"].items()},
           "estimate_s": res["estimate_s"]}  # fmt: skip
    H.write_json(out / f"{mod.name}-datasets.json", obj, indent=1)
    for n, eff in res["effs"].items():
        save_efficiency(out / "efficiency" / f"{mod.name}-{n}.json", eff)
    if res["slices"]:
        import slice_cells as SC

        for (n, f, s), eff in res["slices"]["estimates"].items():
            save_efficiency(SC.artifact_path(out, mod.name, n, f, s), eff)
    return "\n".join(md)


def main(argv: list[str] | None = None) -> int:
    from undercap.artifacts.cache import Cache

    args = parse_args(argv)
    if not H.have_data(args.data_dir):
        return 0
    if args.seeds < 3:
        print("note: fewer than 3 estimate seeds; the tables' seed spreads need >= 3")
    elapsed = H.stopwatch()
    cache, parts = Cache(args.cache_dir), []
    for name in [s.strip() for s in args.modalities.split(",") if s.strip()]:
        res = run_modality(M.MODALITIES[name], args, cache)
        if res is None:
            continue
        parts.append(write_modality(res, args.out))
        for path in figures(res["cells"], res["names"], res["mod"], args.out):
            print(f"wrote {path}", file=sys.stderr)
    text = "\n".join(parts) + f"\n({elapsed():.0f} s in all)\n"
    H.write_text(args.out / "matrix.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
