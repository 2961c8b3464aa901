"""Benchmark: what an estimate spends evaluating, dense vs sparse (issue 34), side by
side in one run.

Jobs (every run on the CPU, one torch thread, one job at a time):

* cifar: the issue's job, `undercap estimate --model small-cnn --dataset
  npz:images/cifar10-quarter-a.npz --batch-sizes 16..128 --target-accuracy 0.4
  --max-samples 60000 --threads 1` (the whole 2500-image held-out split every 128
  samples under dense), at seed 1 (the issue's `--seeds 1` is one seed: seed 0).
* image: the proxy-sensitivity matrix's image job (benchmarks/matrix_data.py,
  dataset cifar-a: small CNN, 4000 train images, 500 held-out, every 512 samples,
  target 0.40, b = 16..256), seed 0 only (the matrix runs 3).
* text: the matrix's text job (dataset shakespeare: the char transformer
  pre-trained on WikiText-2, 9000 windows, 300 held-out, every 256 samples, target
  0.36, b = 16..128), seed 0 only. Pre-training is cached and not timed.

Each job runs dense, then sparse, then (with --repeats 2) again in that order:
alternating, so the machine's load drifts over both alike. Nothing is reused
(no work dir). For each: wall time of the estimate, the evaluation share (seconds
the runs spent evaluating over the seconds the runs took), and N(b) per (b, seed);
sparse must report dense's grid point (or within 2%). --bound-arm adds a third
estimate to each round: sparse with every check at the Bhatia-Davis bound (no item
spread: the check before text windows were read as a cluster sample).

    .venv/bin/python benchmarks/estimate_cost.py            # ~50 min on 2 busy cores
    .venv/bin/python benchmarks/estimate_cost.py --jobs cifar
    .venv/bin/python benchmarks/estimate_cost.py --jobs text --bound-arm   # ~27 min
Writes benchmarks/results/estimate_cost.md and estimate_cost.json. Skips (exit 0)
without the data (data/: python scripts/make_data.py all).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any

import harness as H

OUT = H.RESULTS
JOBS = ("cifar", "image", "text")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=H.DATA)
    p.add_argument("--jobs", default=",".join(JOBS), help="comma list of " + ", ".join(JOBS))
    p.add_argument("--repeats", type=int, default=1, help="dense/sparse pairs per job")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--bound-arm", action="store_true",
                   help="also sparse with every check at the Bhatia-Davis bound (no item "
                   "spread: the check before it), third in each round")  # fmt: skip
    return p.parse_args(argv)


def configs(name: str, data_dir: Path) -> Any:
    """The job's EstimateConfig (dense schedule; sparse is a replace of it)."""
    import matrix_data as M

    from undercap.data.spec import DataSpec
    from undercap.estimate import EstimateConfig

    if name == "cifar":
        spec = DataSpec("npz:images/cifar10-quarter-a.npz", data_dir=str(data_dir))
        return EstimateConfig(
            model="small-cnn",
            data=spec,
            batch_sizes=(16, 32, 64, 128),
            seeds=(1,),
            target_accuracy=0.4,
            max_samples=60_000,
            eval_schedule="dense",
        )
    ds = M.DATASETS["cifar-a" if name == "image" else "shakespeare"]
    mod = M.MODALITIES[ds.modality]
    from undercap.artifacts.cache import Cache

    weights = M.pretrained_weights(mod, data_dir, Cache(H.CACHE))
    cfg = M.estimate_config(ds, data_dir, weights, (0,))
    return dataclasses.replace(cfg, eval_schedule="dense")


def measure(cfg: Any, item_spread: bool = True) -> dict[str, Any]:
    """One estimate, nothing reused: its wall time, evaluation share and N(b)."""
    from unittest import mock

    from undercap.estimate import EstimateConfig, estimate

    real = EstimateConfig.sparse_params

    def params(self: Any, device: str) -> Any:
        return dataclasses.replace(real(self, device), item_spread=item_spread)

    elapsed = H.stopwatch()
    with mock.patch.object(EstimateConfig, "sparse_params", params):
        eff = estimate(cfg, cache_dir=None, torch_device="cpu", progress=False, threads=1,
                       log=lambda _m: None)  # fmt: skip
    wall = elapsed()
    cost = eff.extra["cost"]
    return {
        "schedule": cfg.eval_schedule + ("" if item_spread else "-bound"),
        "wall_s": wall,
        "runs_wall_s": cost["wall_s"],
        "train_wall_s": cost["train_wall_s"],
        "eval_wall_s": cost["eval_wall_s"],
        "eval_share": cost["eval_wall_s"] / cost["wall_s"],
        "n": {str(b): list(runs) for b, runs in eff.samples_to_target.items()},
        "curve_points": sum(len(c) for s in eff.extra["curves"].values() for c in s.values()),
    }


def same_n(dense: dict[str, Any], sparse: dict[str, Any]) -> bool:
    """Sparse's N(b) is dense's: the same grid point, or within 2%."""
    for b, runs in dense["n"].items():
        for i, a in enumerate(runs):
            c = sparse["n"][b][i]
            if (a is None) != (c is None) or (a is not None and abs(a - c) > 0.02 * a):
                return False
    return True


def run_job(name: str, data_dir: Path, repeats: int, bound: bool = False) -> dict[str, Any]:
    dense_cfg = configs(name, data_dir)
    sparse_cfg = dataclasses.replace(dense_cfg, eval_schedule="sparse")
    pairs = []
    for i in range(repeats):
        d = measure(dense_cfg)
        print(
            f"  {name} #{i} dense: {d['wall_s']:.0f} s, eval {d['eval_share']:.0%}", file=sys.stderr
        )
        s = measure(sparse_cfg)
        print(
            f"  {name} #{i} sparse: {s['wall_s']:.0f} s, eval {s['eval_share']:.0%}",
            file=sys.stderr,
        )
        pair = {"dense": d, "sparse": s, "same_n": same_n(d, s)}
        if bound:
            o = measure(sparse_cfg, item_spread=False)
            print(f"  {name} #{i} sparse, bound: {o['wall_s']:.0f} s, "
                  f"eval {o['eval_share']:.0%}", file=sys.stderr)  # fmt: skip
            pair.update(bound=o, bound_same_n=same_n(d, o))
        pairs.append(pair)
    return {"job": name, "pairs": pairs}


def _n_text(d: dict[str, Any], s: dict[str, Any]) -> str:
    parts = []
    for b, runs in d["n"].items():
        for i, a in enumerate(runs):
            c = s["n"][b][i]
            parts.append(f"{b}: {a}" + ("" if a == c else f" / {c}"))
    return ", ".join(parts)


def table(results: list[dict[str, Any]]) -> str:
    head = ["job", "pair", "dense wall", "sparse wall", "wall ratio", "dense eval share",
            "sparse eval share", "curve points dense / sparse",
            "N(b) (dense / sparse where they differ)", "same N(b)"]  # fmt: skip
    rows = []
    for res in results:
        for i, p in enumerate(res["pairs"]):
            d, s = p["dense"], p["sparse"]
            arms = [("", s, p["same_n"])]
            if "bound" in p:
                arms.append((" (sparse: bound)", p["bound"], p["bound_same_n"]))
            for label, arm, same in arms:
                rows.append([
                    f"{res['job']}{label}", i, d["wall_s"], arm["wall_s"],
                    d["wall_s"] / arm["wall_s"], d["eval_share"], arm["eval_share"],
                    f"{d['curve_points']} / {arm['curve_points']}", _n_text(d, arm),
                    "yes" if same else "NO",
                ])  # fmt: skip
    pct = "{:.1%}"
    return H.md_table(head, rows, fmt=[None, None, "{:.1f} s", "{:.1f} s", "{:.1f}x", pct, pct])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not H.have_data(args.data_dir):
        return 0
    import torch

    torch.set_num_threads(1)
    from undercap import defaults

    elapsed = H.stopwatch()
    names = [n.strip() for n in args.jobs.split(",") if n.strip()]
    results = [run_job(n, args.data_dir, args.repeats, args.bound_arm) for n in names]
    ratios = [p["dense"]["wall_s"] / p["sparse"]["wall_s"] for r in results for p in r["pairs"]]
    text = "\n".join([
        "# Estimate cost: dense vs sparse evaluation",
        "",
        "Wall time of `estimate` (CPU, 1 torch thread, nothing reused), the share of the "
        "runs' seconds spent evaluating, and N(b) per (b, seed), dense and sparse side by "
        "side (dense first, alternating). Jobs: benchmarks/estimate_cost.py's docstring. "
        "Sparse (estimate/evalsched.py): sequential looks (the held-out split in random "
        f"order, checked every {defaults.ESTIMATE_CHECK_SAMPLES} items, or four times on a "
        "split too small for four such checks, against a binomial "
        "margin, or a Student t one from the items' own spread where each is several "
        f"predictions, error {defaults.ESTIMATE_LOOK_ERROR:g} per look, Bonferroni), far jumps "
        f"({defaults.ESTIMATE_SPARSE_GROWTH:g}x) with checkpoint replay, CPU evaluation in "
        "batches of 128 (or of the checks' spacing, if smaller), channels-last images, "
        "batch norm folded on large splits.",
        "",
        table(results),
        "",
        f"Median wall ratio {statistics.median(ratios):.1f}x. Benchmark wall time "
        f"{elapsed():.0f} s on a shared 2-core machine. Reproduce: "
        f"`.venv/bin/python benchmarks/estimate_cost.py --jobs {','.join(names)}"
        f" --repeats {args.repeats}{' --bound-arm' if args.bound_arm else ''}`.",
        "",
    ])  # fmt: skip
    H.write_text(args.out / "estimate_cost.md", text)
    H.write_json(args.out / "estimate_cost.json", results, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
