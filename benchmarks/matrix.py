"""Benchmark: the proxy-sensitivity matrix (paper Sec. 5.4, Figs. 5 and 6) on the
SIMULATED Jetson Nano and TX2 NX, for the paper's selection rule and three others.

Text: the char transformer (context 32) pre-trained on WikiText-2, over tiny
Shakespeare, Austen, Chesterton, Milton and Whitman. Images: the small CNN (3x32x32,
seeded random init) over the two CIFAR-10 quarters, MNIST and the bundled digits.
Settings and targets: benchmarks/matrix_data.py. Each dataset's N(b) is estimated
ONCE with several seeds (undercap.estimate; finished runs live in the one cache, so
a re-run costs nothing) and serves as proxy and as target. Every cell (proxy,
target, device, limit, rule) is undercap.report.matrix's: the rule's (b, f) from
the proxy's r(b) and the profile, timed with the target's N(b), against the fastest
feasible configuration on the target. Profiles of the simulated devices come from
the device model (no host compute). Limits: the binding caps compare.py derives
(fractions of the way from the lowest limit every supported model can meet to the
model's unconstrained peak) plus no limit.

Rules (undercap.select.robust): paper = Algorithm 1 on the proxy's mean r(b);
spread = within k standard errors of the best, the smallest worst case; gns-target
= the target's gradient-noise-scale r(b) where it disagrees with the proxy's beyond
both spreads; gns-transfer = the proxy's r(b) rescaled by the ratio of the target's
to the proxy's noise scale when those differ beyond their spreads. The noise scale
is measured per dataset from the starting weights (undercap.estimate.gns), and its
device time is reported against each cell's training time.

Several proxies (undercap.select.ensemble): each target with every other dataset of its
modality as the proxies (proxy "others"): ensemble = Algorithm 1 on the median r(b),
with the mean and minimax regret as controls. --estimates-from DIR recomputes every
cell from a previous run's stored estimates, without training.

    .venv/bin/python benchmarks/matrix.py                      # everything
    .venv/bin/python benchmarks/matrix.py --modalities image --jobs 2
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import statistics
import sys
import time
from pathlib import Path

import matrix_data as M
import matrix_race as MR

RULES = ("paper", "spread", "gns-target", "gns-transfer", "gns-proxy")
#: gns-proxy is a control, not a usable rule: Algorithm 1 on r_gns of the PROXY's own
#: noise scale. If it did as well as gns-target, the target's measurement would not be
#: what helps, only the model's shape of r(b).
#: Several proxies (select/ensemble.py): each target with EVERY OTHER dataset of its
#: modality as the proxies (proxy column "others"). ensemble = Algorithm 1 on the median
#: r(b) over the proxies (the rule); ensemble-mean and ensemble-minimax (the smallest
#: worst regret over the proxies) are controls for the choice of the median.
ENSEMBLE_RULES = ("ensemble", "ensemble-mean", "ensemble-minimax")
#: A race on the target (select/race.py, issue 25; matrix_race.py replays it on the
#: stored curves): "default" is what `undercap run` does with these proxies by default
#: (the ensemble rule, or the race when defaults.RACE is on), "race" the race as
#: `--race` runs it (defaults.RACE_*), its device-time cost in each cell.
RACE_RULES = ("default", "race")
ALL_RULES = RULES + ENSEMBLE_RULES + RACE_RULES
OTHERS = "others"
DEVICES = ("sim:jetson-nano", "sim:jetson-tx2nx")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=M.DEFAULT_DATA)
    p.add_argument("--cache-dir", type=Path, default=M.DEFAULT_CACHE)
    p.add_argument("--out", type=Path, default=M.REPO / "benchmarks" / "results" / "matrix")
    p.add_argument("--modalities", default="text,image")
    p.add_argument("--datasets", default=None, help="only these (comma-separated; default all)")
    p.add_argument("--devices", default=",".join(DEVICES))
    p.add_argument("--seeds", type=int, default=3, help="estimate seeds per dataset (>= 3)")
    p.add_argument("--jobs", type=int, default=2, help="parallel estimate runs (1 thread each)")
    p.add_argument("--cap-fractions", type=lambda s: [float(x) for x in s.split(",")],
                   default=[1 / 3, 2 / 3])  # fmt: skip
    p.add_argument("--probe-b-small", type=int, default=16)
    p.add_argument("--probe-k", type=int, default=8, help="B_big = k x B_small")
    p.add_argument("--probe-steps", type=int, default=8, help="as GNS_MAX_STEPS")
    p.add_argument("--spread-k", type=float, default=None, help="default: defaults.SPREAD_K")
    p.add_argument("--estimates-from", type=Path, default=None, metavar="DIR",
                   help="no training: every dataset's N(b) from DIR/efficiency/<modality>-<name>.json "
                   "and its noise scale from DIR/<modality>-datasets.json (a previous run's --out)")  # fmt: skip
    return p.parse_args(argv)


# --- measuring each dataset once ------------------------------------------------------------
def estimate_all(mod: M.Modality, names: list[str], args, cache, weights):  # type: ignore[no-untyped-def]
    from undercap.estimate import estimate

    effs = {}
    for name in names:
        cfg = M.estimate_config(M.DATASETS[name], args.data_dir, weights, range(args.seeds))
        # dense curves: matrix_race.py replays every curve point (issue 34: the sparse
        # schedule keeps only the points it evaluated); dense keeps the cache keys too
        cfg = dataclasses.replace(cfg, eval_schedule="dense")
        t0 = time.monotonic()
        effs[name] = estimate(cfg, cache_dir=cache.root, jobs=args.jobs, torch_device="cpu",
                              progress=False, threads=1, log=lambda _m: None)  # fmt: skip
        print(f"  {name}: N(b) estimated ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return effs


def stored_estimates(mod: M.Modality, names: list[str], src: Path):  # type: ignore[no-untyped-def]
    """Each dataset's efficiency artifact and noise scale as a previous run stored them
    (--estimates-from): the cells are arithmetic on these and the profiles, so they
    are recomputed exactly without training."""
    from undercap.artifacts.efficiency import load_efficiency
    from undercap.estimate.gns import NoiseScale

    effs = {n: load_efficiency(src / "efficiency" / f"{mod.name}-{n}.json") for n in names}
    stored = json.loads((src / f"{mod.name}-datasets.json").read_text())
    gns = {n: NoiseScale.from_dict(stored["noise_scale"][n]) for n in names}
    return effs, gns, stored.get("estimate_s")


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


def noise_scale(mod: M.Modality, name: str, args, cache, weights):  # type: ignore[no-untyped-def]
    """B_simple on the dataset's training split from the starting weights (cached)."""
    from undercap.artifacts.io import file_sha256
    from undercap.data.spec import load_splits
    from undercap.estimate.gns import NoiseScale, probe_noise_scale
    from undercap.models.weights import initial_model

    ds = M.DATASETS[name]
    spec = M.data_spec(ds, args.data_dir)
    b_small, steps = args.probe_b_small, args.probe_steps
    key = {"model": mod.model, "data": spec.key(), "b_small": b_small, "k": args.probe_k,
           "steps": steps, "weights": file_sha256(weights) if weights else None, "seed": 0}  # fmt: skip

    def make() -> dict:
        splits = load_splits(spec)
        model, _ = initial_model(mod.model, splits, init_seed=0, pretrained=weights)
        ns = probe_noise_scale(model, splits, b_small=b_small, b_big=b_small * args.probe_k,
                               steps=steps, seed=0)  # fmt: skip
        return ns.to_dict()

    return NoiseScale.from_dict(cache.json("gns-probe", key, make))


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
def choose(rule: str, profile, limit, proxy: dict, target: dict, k):  # type: ignore[no-untyped-def]
    from undercap import defaults
    from undercap.select import robust as R
    from undercap.select import select_ours

    rel, spread = proxy["relative"], proxy["spread"]
    if rule == "paper":
        return select_ours(profile, rel, limit)
    if rule == "spread":
        return R.select_spread(profile, rel, spread, limit, k=defaults.SPREAD_K if k is None else k)
    t, p = target["gns"], proxy["gns"]
    if rule == "gns-target":
        rel, _ = R.gns_target_relative(rel, spread, t.b_simple, t.b_low, t.b_high)
    elif rule == "gns-proxy":
        rel = R.gns_target_relative(rel, None, p.b_simple, p.b_simple, p.b_simple)[0]
    elif rule == "gns-transfer":
        rel, _ = R.gns_transfer_relative(rel, (t.b_simple, t.b_low, t.b_high),
                                         (p.b_simple, p.b_low, p.b_high))  # fmt: skip
    return select_ours(profile, rel, limit)


def cells_for(profile, device_name, limits, data: dict, args, rules=RULES):  # type: ignore[no-untyped-def]
    from undercap.report.matrix import make_cell

    cells = []
    for lim in limits:
        for p, proxy in data.items():
            for t, target in data.items():
                samples = {b: statistics.fmean(n) for b, n in target["runs"].items()}
                for rule in rules:
                    c = choose(rule, profile, lim, proxy, target, args.spread_k)
                    cells.append(make_cell(profile, c, samples, proxy=p, target=t,
                                           device=device_name, power_limit_w=lim, rule=rule))  # fmt: skip
    return cells


def ensemble_cells(profile, device_name, limits, data: dict, rules=ENSEMBLE_RULES):  # type: ignore[no-untyped-def]
    """Each target with every other dataset as the proxies (leave the target out)."""
    from undercap.report.matrix import make_cell
    from undercap.select import ensemble as E

    how = {"ensemble": E.select_ensemble, "ensemble-mean": E.select_mean,
           "ensemble-minimax": E.select_minimax}  # fmt: skip
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


def one_seed_cells(profile, device_name, limits, data: dict, seeds: int):  # type: ignore[no-untyped-def]
    """The paper's rule with r(b) from a single estimate seed of the proxy."""
    from undercap.report.matrix import make_cell
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


def probe_costs(profile, limits, data: dict, cells, args) -> list[float]:  # type: ignore[no-untyped-def]
    """The probe's device time on the target (its B_small passes at the highest clock
    feasible for B_small) as a fraction of each paper-rule cell's training time."""
    from undercap.select.core import margin_of

    out = []
    b = args.probe_b_small
    for lim in limits:
        rows = [r for r in profile.rows if r.batch_size == b
                and (lim is None or r.peak_power_w + margin_of(r) <= lim)]  # fmt: skip
        if not rows:
            continue
        t = max(rows, key=lambda r: r.freq_mhz).time_per_sample_s
        probe_s = t * b * args.probe_k * args.probe_steps
        out += [probe_s / c.time_s for c in cells if c.rule == "paper" and c.power_limit_w == lim
                and c.proxy != c.target]  # fmt: skip
    return out


# --- tables and figures -----------------------------------------------------------------------
def _lim(w: float | None) -> str:
    return "none" if w is None else f"{w:g} W"


def summary_table(cells, one_seed: dict, rules=ALL_RULES) -> str:  # type: ignore[no-untyped-def]
    """Per device and limit: oracle-hit share and worst cell for each rule, and the
    paper's rule from one estimate seed (mean +- std over the seeds)."""
    from undercap.report.matrix import summarize

    by = {(s.device, s.power_limit_w, s.rule): s for s in summarize(cells)}
    seeds = {
        s: {(x.device, x.power_limit_w): x for x in summarize(cs)} for s, cs in one_seed.items()
    }
    head = (
        ["device", "limit"] + [f"{r}: hits, worst" for r in rules] + ["paper, 1 seed: hits, worst"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
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
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def overall_table(cells, rules=ALL_RULES) -> str:  # type: ignore[no-untyped-def]
    from undercap.report.matrix import summarize

    lines = [
        "| rule | cells | oracle hits | within 3% | mean gap | worst cell |",
        "|---|---|---|---|---|---|",
    ]
    for r in rules:
        cs = [c for c in cells if c.rule == r and c.proxy != c.target]
        s = summarize([*cs], group_limits=True)
        n = sum(x.cells for x in s)
        hits, w3 = sum(x.hits for x in s), sum(x.within_3pct for x in s)
        worst = max(s, key=lambda x: x.worst_gap_pct)
        mean = statistics.fmean(c.gap_pct for c in cs)
        lines.append(f"| {r} | {n} | {hits} ({100 * hits / n:.0f}%) | {w3} ({100 * w3 / n:.0f}%) "
                     f"| {mean:+.2f}% | {worst.worst_gap_pct:+.1f}% ({worst.device}: {worst.worst}) |")  # fmt: skip
    return "\n".join(lines) + "\n"


def ensemble_table(cells, effs: dict) -> str:  # type: ignore[no-untyped-def]
    """Per target (every device and limit): the worst cell of the paper's rule with each
    single proxy and with its best one, against the several-proxy rules; and what the
    proxies cost on the server (samples trained and summed run time of the estimates)."""
    heads = ["target", "proxies", "paper, worst single proxy", "paper, best single proxy",
             *[f"{r}: hits, worst" for r in ENSEMBLE_RULES], "server: samples (x one proxy)",
             "server: run time (summed)"]  # fmt: skip
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for t in effs:
        proxies = [p for p in effs if p != t]
        paper = [c for c in cells if c.rule == "paper" and c.target == t and c.proxy != t]
        per_proxy = {p: max(c.gap_pct for c in paper if c.proxy == p) for p in proxies}
        worst_p, best_p = max(per_proxy, key=per_proxy.get), min(per_proxy, key=per_proxy.get)
        row = [t, ", ".join(proxies), f"{per_proxy[worst_p]:+.1f}% ({worst_p})",
               f"{per_proxy[best_p]:+.1f}% ({best_p})"]  # fmt: skip
        for r in ENSEMBLE_RULES:
            cs = [c for c in cells if c.rule == r and c.target == t]
            row.append(f"{sum(c.hit for c in cs)}/{len(cs)}, {max(c.gap_pct for c in cs):+.1f}%")
        samples = [effs[p].extra["cost"]["samples_trained"] for p in proxies]
        wall = sum(effs[p].extra["cost"]["wall_s"] for p in proxies)
        row += [f"{sum(samples):,} ({sum(samples) / statistics.median(samples):.1f})",
                f"{wall / 60:.0f} min"]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def dataset_table(data: dict, mod: M.Modality) -> str:
    from undercap.select.robust import fit_noise_scale

    bs = list(mod.batch_sizes)
    head = (
        ["dataset", "target", "reached"]
        + [f"r({b})" for b in bs]
        + ["B fit to r(b)", "B_simple at start [16-84%]"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, d in data.items():
        ds, sp, rel = M.DATASETS[name], d["spread"], d["relative"]
        g = d["gns"]
        cells = [f"{rel[b]:.2f} +- {sp[b]['std']:.2f}" if b in rel else "excl." for b in bs]
        hi = "inf" if g.b_high is None else f"{g.b_high:.0f}"
        bsimple = "-" if g.b_simple is None else f"{g.b_simple:.0f} [{g.b_low or 0:.0f}, {hi}]"
        lines.append("| " + " | ".join([name, f"{ds.target_accuracy:.2f}", d["reached"], *cells,
                                         f"{fit_noise_scale(rel):.0f}", bsimple]) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def figures(cells, names, mod: M.Modality, out: Path, rules=RULES) -> list[Path]:  # type: ignore[no-untyped-def]
    from undercap.report.matrix import plot_matrix

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
    t0 = time.monotonic()
    print(f"== {mod.name}: {names}", file=sys.stderr)
    if args.estimates_from is not None:
        effs, gns, stored_s = stored_estimates(mod, names, args.estimates_from)
    else:
        weights = M.pretrained_weights(mod, args.data_dir, cache)
        effs = estimate_all(mod, names, args, cache, weights)
        gns = {n: noise_scale(mod, n, args, cache, weights) for n in names}
    data = {}
    for name in names:
        runs = usable(effs[name])
        rel, spread = relative_from(runs)
        n_all = len(effs[name].samples_to_target) * args.seeds
        reached = sum(n is not None for r in effs[name].samples_to_target.values() for n in r)
        data[name] = {"runs": runs, "relative": rel, "spread": spread, "reached": f"{reached}/{n_all}",
                      "gns": gns[name], "target_accuracy": effs[name].target_accuracy}  # fmt: skip
    t_est = stored_s if args.estimates_from is not None else time.monotonic() - t0
    cells, one_seed, costs = [], {s: [] for s in range(args.seeds)}, []
    race = {"rows": [], "sweep": {}, "curves": {n: MR.curves_of(effs[n]) for n in names}}
    for device_name in args.devices.split(","):
        profile, limits = device_side(mod, device_name, args, cache, names)
        cs = cells_for(profile, device_name, limits, data, args)
        ens = ensemble_cells(profile, device_name, limits, data)
        cells += cs + ens + default_and_race(profile, device_name, limits, data, ens, race)
        for s, c1 in one_seed_cells(profile, device_name, limits, data, args.seeds).items():
            one_seed[s] += c1
        costs += probe_costs(profile, limits, data, cs, args)
    return {"mod": mod, "names": names, "data": data, "cells": cells, "one_seed": one_seed,
            "probe_costs": costs, "estimate_s": t_est, "effs": effs, "race": race}  # fmt: skip


def default_and_race(profile, device_name, limits, data: dict, ens: list, race: dict) -> list:  # type: ignore[no-untyped-def]
    """The default rule's and the race's cells; the race grid's cells into race["sweep"],
    the race's per-seed detail into race["rows"] (matrix_race.py)."""
    from undercap import defaults

    opt_in = MR.default_params()
    raced, rows = MR.race_cells(profile, device_name, limits, data, race["curves"], opt_in, "race")
    race["rows"] += rows
    for p in MR.GRID:
        cs, rows = MR.race_cells(profile, device_name, limits, data, race["curves"], p, p.label)
        acc = race["sweep"].setdefault(p.label, ([], []))
        acc[0].extend(cs)
        acc[1].extend(rows)
    median = [c for c in ens if c.rule == "ensemble"]
    default = raced if defaults.RACE else median
    return MR.relabel(default, "default") + raced


def write_modality(res: dict, out: Path) -> str:
    from undercap.artifacts import write_atomic

    mod, cells = res["mod"], res["cells"]
    costs = sorted(res["probe_costs"])
    g = next(iter(res["data"].values()))["gns"]
    md = [f"## {mod.name}: {mod.model}, datasets {', '.join(res['names'])}", "",
          dataset_table(res["data"], mod), "Overall (off-diagonal cells, every device and limit):", "",
          overall_table(cells), "Per device and limit (hits = cells choosing the fastest configuration; "
          "worst = the largest % over the fastest, proxy -> target):", "",
          summary_table(cells, res["one_seed"]),
          f"Several proxies (rule `ensemble`, src/undercap/select/ensemble.py; proxy column "
          f"\"{OTHERS}\" in the cells CSV): each target with every other dataset as the proxies, "
          "per target over every device and limit. Server: samples the proxies' estimates "
          "trained (and as a multiple of one proxy's, their median), and the summed wall time "
          "of their runs (single-threaded runs, two at a time on this machine):", "",
          ensemble_table(cells, res["effs"]),
          "A race on the target (select/race.py; `default` is what `undercap run` does by default, "
          "`race` is `--race` with its defaults, every race's device-time cost included; "
          f"per seed in `{mod.name}-race.csv`). The budget grid (k candidates, budget per candidate "
          "as a share of the favourite's predicted time, m the accuracy margin), same cells:", "",
          MR.sweep_table(res["race"]["sweep"], [c for c in cells if c.rule == "ensemble"]),          f"Noise-scale probe: {g.steps} steps of B_big = {g.b_big} as sub-batches of {g.b_small} "
          f"({g.samples} samples) per target; its device time is {100 * costs[len(costs) // 2]:.1f}% "
          f"of the training time of the median cell (min {100 * costs[0]:.1f}%, max {100 * costs[-1]:.1f}%).",
          ""]  # fmt: skip
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = list(cells[0].to_dict())
    w.writerow(keys)
    for c in cells:
        d = c.to_dict()
        w.writerow([d[k] for k in keys])
    write_atomic(out / f"{mod.name}-cells.csv", buf.getvalue())
    write_atomic(out / f"{mod.name}-race.csv", MR.rows_csv(res["race"]["rows"]))
    gns = {n: d["gns"].to_dict() for n, d in res["data"].items()}
    obj = {"datasets": {n: {"runs": {str(b): v for b, v in d["runs"].items()},
                            "relative": {str(b): v for b, v in d["relative"].items()},
                            "reached": d["reached"]} for n, d in res["data"].items()},
           "noise_scale": gns, "estimate_s": res["estimate_s"]}  # fmt: skip
    write_atomic(out / f"{mod.name}-datasets.json", json.dumps(obj, indent=1) + "\n")
    for n, eff in res["effs"].items():
        from undercap.artifacts.efficiency import save_efficiency

        save_efficiency(out / "efficiency" / f"{mod.name}-{n}.json", eff)
    return "\n".join(md)


def main(argv: list[str] | None = None) -> int:
    from undercap.artifacts import write_atomic
    from undercap.artifacts.cache import Cache

    args = parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"skipped: no data at {args.data_dir} (see ../shared/data/README.md)")
        return 0
    if args.seeds < 3:
        print("note: fewer than 3 estimate seeds; the spread rule and tables need >= 3")
    t0 = time.monotonic()
    cache, parts = Cache(args.cache_dir), []
    for name in [s.strip() for s in args.modalities.split(",") if s.strip()]:
        res = run_modality(M.MODALITIES[name], args, cache)
        if res is None:
            continue
        parts.append(write_modality(res, args.out))
        for path in figures(res["cells"], res["names"], res["mod"], args.out):
            print(f"wrote {path}", file=sys.stderr)
    text = "\n".join(parts) + f"\n({time.monotonic() - t0:.0f} s in all)\n"
    write_atomic(args.out / "matrix.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
