"""Benchmark: r(b) estimates as Ray tasks (`--executor ray`) against the local process
pool (`--jobs`), side by side in one run, on the proxy-sensitivity matrix's text
datasets (benchmarks/matrix_data.py: the char transformer pre-trained on WikiText-2,
tiny Shakespeare, Austen, Chesterton, Milton, Whitman).

On one machine both sides have the same cores, so the ratio Ray / pool is Ray's
overhead (starting a local Ray, scheduling, moving records through its object
store), not a speed-up. Both start from empty run caches; every estimate of one side
runs under one executor (one pool per estimate, one Ray for all). Each run's record
is compared between the sides: the same N(b) is part of the result. From the runs'
own wall times the table also gives what W workers could do: runs are independent, so
an estimate's wall time is about max(sum of run times / W, longest run) plus the start.

Kept small by default (2 batch sizes, 2 seeds, a 600-sample budget and a target of
0.9 x the largest batch's best accuracy within it, so every budget has a target:
20 runs a side, twice, alternating which side goes first); the flags scale it up to the matrix's
settings (--batch-sizes 16,32,64,128 --seeds 3 --max-samples 12000 --target-fraction 0).

    .venv/bin/python benchmarks/ray_estimate.py                    # local Ray vs --jobs 2
    .venv/bin/python benchmarks/ray_estimate.py --ray-address HOST:6379   # a cluster
Writes benchmarks/results/ray/results.json and README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path

import harness as H
import matrix_data as M


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=H.DATA)
    p.add_argument("--cache-dir", type=Path, default=H.CACHE,
                   help="where the pre-trained weights are kept (the matrix's cache)")  # fmt: skip
    p.add_argument("--out", type=Path, default=H.RESULTS / "ray")
    p.add_argument("--datasets", default=None, help="text datasets (default: all five)")
    p.add_argument("--batch-sizes", default="32,128")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--max-samples", type=int, default=600, help="budget per run")
    p.add_argument(
        "--target-fraction",
        type=float,
        default=0.9,
        help="target = this fraction of the largest batch's best accuracy within the budget, "
        "so every budget has one; 0: the matrix's absolute targets",
    )
    p.add_argument("--jobs", type=int, default=2, help="the pool's workers (1 thread each)")
    p.add_argument("--ray-address", default=None, help="a cluster (default: a local Ray)")
    p.add_argument("--reps", type=int, default=2, help="repetitions, alternating the order")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite README.md from OUT/results.json, without running")  # fmt: skip
    return p.parse_args(argv)


def configs(args: argparse.Namespace) -> list:  # type: ignore[type-arg]
    from undercap.artifacts.cache import Cache

    text = M.MODALITIES["text"]
    names = args.datasets.split(",") if args.datasets else [
        d.name for d in M.DATASETS.values() if d.modality == "text"]  # fmt: skip
    missing = [f for n in names for f in M.DATASETS[n].needs if not (args.data_dir / f).is_file()]
    if missing:
        sys.exit(f"error: the text datasets are not under {args.data_dir}: {missing[:3]}")
    weights = M.pretrained_weights(text, args.data_dir, Cache(args.cache_dir), progress=True)
    sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    relative = {"target_accuracy": None, "target_fraction": args.target_fraction}
    return [
        dataclasses.replace(
            M.estimate_config(M.DATASETS[n], args.data_dir, weights, range(args.seeds)),
            batch_sizes=sizes,
            max_samples=args.max_samples,
            **(relative if args.target_fraction else {}),
        )
        for n in names
    ]


def side(executor: str, cfgs: list, args: argparse.Namespace) -> dict:  # type: ignore[type-arg]
    """Every estimate on one executor, from an empty cache: wall time and records."""
    from undercap.estimate import estimate, executor_session

    work = Path(tempfile.mkdtemp(prefix=f"ray-bench-{executor}-"))
    kw = dict(cache_dir=work, jobs=args.jobs, torch_device="cpu", progress=False, threads=1,
              log=lambda _m: None, executor=executor,
              ray_address=args.ray_address if executor == "ray" else None)  # fmt: skip
    elapsed, effs, phases = H.stopwatch(), [], []
    with executor_session(executor, kw["ray_address"]):
        started_s = elapsed()
        for cfg in cfgs:
            seen = set(work.glob("estimate-run/*/value.json"))
            effs.append(estimate(cfg, **kw))
            runs = [
                json.loads(p.read_text())
                for p in set(work.glob("estimate-run/*/value.json")) - seen
            ]
            # reference runs (the largest batch, no target yet) go first, the rest after
            for ref in (True, False):
                phases.append([r["wall_s"] for r in runs if (r["target_accuracy"] is None) == ref])
    wall_s = elapsed()
    return {
        "executor": executor,
        "wall_s": wall_s,
        "start_s": started_s if executor == "ray" else None,
        "runs": sum(len(p) for p in phases),
        "phase_run_wall_s": [p for p in phases if p],
        "samples_to_target": {e.dataset: e.samples_to_target for e in effs},
        "curves": {e.dataset: e.extra["curves"] for e in effs},
        "nodes": effs[0].extra["config"].get("ray_nodes", 1),
    }


def settings(args: argparse.Namespace, argv: list[str], datasets: list[str]) -> dict:  # type: ignore[type-arg]
    from undercap.estimate.runs import cpu_cores

    keep = ("batch_sizes", "seeds", "max_samples", "target_fraction", "jobs", "ray_address")
    return {"argv": argv, "host": platform.node(), "cores": cpu_cores(), "datasets": datasets,
            **{k: getattr(args, k) for k in keep}}  # fmt: skip


def measure(cfgs: list, args: argparse.Namespace) -> dict:  # type: ignore[type-arg]
    reps = []
    for rep in range(args.reps):
        order = ("local", "ray") if rep % 2 == 0 else ("ray", "local")
        one = {ex: side(ex, cfgs, args) for ex in order}
        same = all(one["local"][k] == one["ray"][k] for k in ("samples_to_target", "curves"))
        reps.append({"ratio": one["ray"]["wall_s"] / one["local"]["wall_s"], "same_n_b": same,
                     **{ex: one[ex] for ex in ("local", "ray")}})  # fmt: skip
        print(f"rep {rep}: pool {one['local']['wall_s']:.1f} s, ray {one['ray']['wall_s']:.1f} s "
              f"(start {one['ray']['start_s']:.1f} s), same N(b): {same}", file=sys.stderr)  # fmt: skip
    return {"reps": reps, "ratio_median": statistics.median(r["ratio"] for r in reps)}


def ideal_s(phases: list[list[float]], workers: int) -> float:
    """Wall time of these runs on `workers` one-thread workers with no start-up: each
    phase of each estimate (the reference runs, then the rest) packed longest run
    first on the least loaded worker."""
    total = 0.0
    for phase in phases:
        load = [0.0] * workers
        for t in sorted(phase, reverse=True):
            load[load.index(min(load))] += t
        total += max(load)
    return total


def write(res: dict, out: Path) -> None:  # type: ignore[type-arg]
    H.write_json(out / "results.json", res, indent=1)
    st, r0 = res["settings"], res["reps"][0]
    lines = [
        "# r(b) estimates on Ray vs the local pool",
        "",
        f"`.venv/bin/python {' '.join(['benchmarks/ray_estimate.py', *st['argv']])}` on "
        f"{st['host']} ({st['cores']} cores, shared with other work), {len(st['datasets'])} "
        f"text datasets x batch sizes {st['batch_sizes']} x {st['seeds']} seed(s), budget "
        f"{st['max_samples']} samples, target fraction {st['target_fraction']}, pool --jobs "
        f"{st['jobs']} vs {st['ray_address'] or 'a local Ray'} ({r0['ray']['nodes']} node(s)), "
        "1 thread per run, each side from an empty run cache.",
        "",
        H.md_table(
            ["rep", "runs", "pool wall (s)", "Ray wall (s)", "of it Ray start (s)", "Ray / pool",
             "same N(b) and curves"],
            [[i, r["local"]["runs"], r["local"]["wall_s"], r["ray"]["wall_s"], r["ray"]["start_s"],
              r["ratio"], "yes" if r["same_n_b"] else "NO"] for i, r in enumerate(res["reps"])],
            fmt=[None, None, "{:.1f}", "{:.1f}", "{:.1f}", "{:.3f}"],
        ),
    ]  # fmt: skip
    H.write_text(out / "README.md", "\n".join([*lines, "", *summary(res), ""]))


def summary(res: dict) -> list[str]:  # type: ignore[type-arg]
    """Where each side's time went beyond its runs, and the expected scaling, in words."""
    st, reps = res["settings"], res["reps"]
    beyond = {ex: statistics.median(
        r[ex]["wall_s"] - (r[ex]["start_s"] or 0.0) - ideal_s(r[ex]["phase_run_wall_s"], st["jobs"])
        for r in reps) for ex in ("local", "ray")}  # fmt: skip
    phases = reps[0]["local"]["phase_run_wall_s"]
    runs = [t for phase in phases for t in phase]
    workers = (2, 4, 8, 16)
    ideal = [ideal_s(phases, w) for w in workers]
    widest, n = max(len(p) for p in phases), len(st["datasets"])
    return [
        f"Median Ray / pool: **{res['ratio_median']:.3f}**. Beyond its runs packed on "
        f"{st['jobs']} workers (their own measured times), the pool took {beyond['local']:+.1f} s "
        f"(median over reps; {beyond['local'] / n:+.1f} s per estimate: it spawns new workers, "
        f"which import torch, for every estimate) and Ray {beyond['ray']:+.1f} s besides its "
        f"start ({beyond['ray'] / len(runs):+.2f} s a run; one local Ray for all {n} "
        f"estimates, its workers kept). Both load each dataset once per worker. Runs took "
        f"{min(runs):.1f}-{max(runs):.1f} s each ({sum(runs):.0f} s "
        "in all, rep 0's pool).",
        "",
        "Ideal wall time with W one-thread workers (no start-up), from rep 0's runs:",
        "",
        H.md_table(["W", *workers], [["s", *(f"{t:.0f}" for t in ideal)]]),
        "",
        "Expected scaling: the runs of one phase of an estimate (the largest batch's "
        "reference runs, then every other run) are independent, so W workers divide its "
        "run time by up to W until each phase takes as long as its longest run. With "
        f"these small settings a phase has at most {widest} runs, so more than {widest} "
        "workers gain nothing; the matrix's settings (4 batch sizes x 3 seeds: 3 reference "
        "runs, then 9) keep up to 9 workers busy per estimate. On a cluster Ray adds "
        "its own round trips (a record and, once per node, the weights) to each run.",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.report_only:
        res = json.loads((args.out / "results.json").read_text())
    else:
        cfgs = configs(args)
        res = measure(cfgs, args)
        res["settings"] = settings(args, argv, [c.data.dataset for c in cfgs])
    write(res, args.out)
    print((args.out / "README.md").read_text())
    return 0 if all(r["same_n_b"] for r in res["reps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
