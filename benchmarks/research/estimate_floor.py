"""Benchmark: the least any schedule of sequential looks can spend evaluating on the
issue-34 CIFAR estimate, from the job's own per-image verdicts.

Runs the dense estimate of benchmarks/estimate_cost.py's `cifar` job (the small CNN on
a CIFAR-10 quarter, 2,500 held-out images every 128 samples, b = 16..128, seed 1,
target 0.40, one torch thread) and keeps, at every whole evaluation, each held-out
image's verdict (right or wrong) in the order a sparse look scores them. Scoring them
is itself an evaluation the way sparse runs evaluate on a CPU (batches of 128,
channels-last images, batch norm folded), timed: the seconds per held-out image.
The seconds per training sample are the dense runs' own.

Then, for each run, a floor no schedule of looks reaches: it trains to dense's N(b)
once (no replay), skips every grid point more than `far_gap` below the target for free
(an oracle knows where to look), pays at every other grid point before N(b) the fewest
images a sequential look (train/loop/evalplan.Check, with the estimate's checks and z)
needs to rule it out, the whole split where none can, and the whole split at N(b).
Printed: each run's floor, and in total the floor's wall time and evaluation share
beside the whole-split-only floor (no checks at all).

Then a bound under any test, not only these looks: the same oracle (far grid points
free), and at each near grid point the images a fixed-size one-sided test at 5% error
(z = 1.645) needs to tell its whole-split accuracy a from the target when it is told a
in advance, m = n0 / (1 + n0 / n) with n0 = z^2 a (1 - a) / (a - target)^2 (the
sample size for a proportion, with the finite-population correction: Cochran,
Sampling Techniques, 1977, Sec. 4.4); likewise at N(b) to tell it is above. Grid points
within 2% of N(b) before it cost nothing (the issue accepts an N(b) within 2% of
dense's). A schedule that does not know a ahead, or that checks more than once, scores
more.

Research (a bound, not a headline result: benchmarks/research/README.md).

    .venv/bin/python benchmarks/research/estimate_floor.py       # ~15 min on a 2-core machine
Writes benchmarks/results/research/estimate_floor.md. Skips (exit 0) without the data.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness as H  # noqa: E402

OUT = H.RESULTS / "research"


def record(data_dir: Path) -> tuple[dict[int, list[tuple[float, Any]]], dict[str, Any]]:
    """The dense estimate, with each whole evaluation's per-image verdicts by b, and
    the costs: seconds per training sample, per held-out image (sparse's evaluation)."""
    import estimate_cost as E
    import torch

    import undercap.train.loop as L
    from undercap import defaults
    from undercap.estimate import estimate
    from undercap.train.loop.fold import folded

    bs = defaults.ESTIMATE_SPARSE_EVAL_BATCH  # the sparse runs' evaluation batches
    verdicts: dict[int, list[tuple[float, Any]]] = {}
    timing = {"images": 0, "seconds": 0.0}
    current: dict[str, int] = {}  # the batch size of the run being evaluated
    real_score, real_init, real_step = L.score_until, L.Trainer.__post_init__, L.Trainer.step

    def post_init(self: Any) -> None:
        real_init(self)
        self._floor_b = self.cfg.batch_size

    def score_until(model: Any, x: Any, y: Any, **kw: Any) -> Any:
        done = real_score(model, x, y, **kw)
        if kw.get("stop") is None and done.complete:
            elapsed = H.stopwatch()
            twin = folded(model) or model
            xc = x.contiguous(memory_format=torch.channels_last)
            with torch.no_grad():
                right = torch.cat(
                    [twin(xc[i : i + bs]).argmax(-1) == y[i : i + bs] for i in range(0, len(y), bs)]
                )
            timing["seconds"] += elapsed()
            timing["images"] += len(y)
            verdicts.setdefault(current["b"], []).append((done.metric, right.numpy()))
        return done

    def step_hook(self: Any) -> None:
        current["b"] = self._floor_b
        real_step(self)

    L.score_until, L.Trainer.__post_init__, L.Trainer.step = score_until, post_init, step_hook
    cfg = E.configs("cifar", data_dir)
    eff = estimate(cfg, cache_dir=None, torch_device="cpu", progress=False, threads=1,
                   log=lambda _m: None)  # fmt: skip
    cost, curves = eff.extra["cost"], eff.extra["curves"]  # one seed: {b: {seed: curve}}
    return verdicts, {
        "train_s_per_sample": cost["train_wall_s"] / cost["samples_trained"],
        "eval_s_per_image": timing["seconds"] / timing["images"],
        "n": {int(b): runs[0] for b, runs in eff.samples_to_target.items()},
        "samples": {int(b): [s for s, _ in next(iter(c.values()))] for b, c in curves.items()},
        "target": cfg.target_accuracy,
    }


def floor(runs: dict[int, list[tuple[float, Any]]], costs: dict[str, Any]) -> list[dict[str, Any]]:
    """Each run's floor (module docstring): images a look needs at each grid point,
    and the images the bound's oracle-sized tests score."""
    from undercap import defaults
    from undercap.train.loop.evalplan import Check, check_z

    target = costs["target"]
    gap, check_every = defaults.ESTIMATE_SPARSE_FAR_GAP, defaults.ESTIMATE_CHECK_SAMPLES
    rows = []
    for b, points in sorted(runs.items()):
        n, n_b = len(points[0][1]), costs["n"][b]
        z = check_z(n, check_every, defaults.ESTIMATE_LOOK_ERROR)
        images = whole_only = near = 0
        bound = items_to_tell(points[-1][0], target, n)  # N(b): told it is above
        # the last point is N(b): whole
        for (acc, right), s in zip(points[:-1], costs["samples"][b][:-1], strict=True):
            if acc < target - gap:
                continue
            near += 1
            whole_only += n
            images += _look_images(right, Check(target, n, check_every, z), n)
            if s < 0.98 * n_b:  # within 2% of N(b): accepted as N(b)
                bound += items_to_tell(acc, target, n)
        rows.append({"b": b, "n_b": n_b, "near_points": near, "images": images + n,
                     "whole_only_images": whole_only + n, "bound_images": bound})  # fmt: skip
    return rows


def items_to_tell(acc: float, target: float, n: int, z: float = 1.645) -> int:
    """Items of n a one-sided z-test that knows `acc` needs to tell it from `target`."""
    gap = abs(acc - target)
    if gap == 0.0:
        return n
    return min(n, math.ceil(1.0 / (gap * gap / (z * z * acc * (1.0 - acc)) + 1.0 / n)))


def _look_images(right: Any, check: Any, n: int) -> int:
    """Images a sequential look scores before `check` stops it (n: none does)."""
    import numpy as np

    from undercap import defaults

    cum, bs = np.cumsum(right), defaults.ESTIMATE_SPARSE_EVAL_BATCH
    for m in range(bs, n, bs):  # a look checks at the end of the sparse runs' batches
        if check(float(cum[m - 1]) / m, m):
            return m
    return n


def args_or_skip(
    doc: str, argv: list[str] | None, jobs: tuple[str, ...] = ()
) -> argparse.Namespace | None:
    """The arguments of a benchmark on the shared data (--data-dir, --out, --jobs where
    it has `jobs`); None, said so, where the data is not there. One torch thread."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=H.DATA)
    if jobs:
        p.add_argument("--jobs", default=",".join(jobs), help="comma list of " + ", ".join(jobs))
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not H.have_data(args.data_dir):
        return None
    import torch

    torch.set_num_threads(1)
    return args


def main(argv: list[str] | None = None) -> int:
    args = args_or_skip(__doc__, argv)
    if args is None:
        return 0
    runs, costs = record(args.data_dir)
    rows = floor(runs, costs)
    tr, ev = costs["train_s_per_sample"], costs["eval_s_per_image"]
    head = ["b", "N(b)", "grid points within the far gap before N(b)", "images a floor look scores",
            "floor train s", "floor eval s", "floor eval share", "whole-only eval share",
            "images any test scores", "any test's eval share"]  # fmt: skip
    table = []
    total_t = total_e = total_w = total_a = 0.0
    for r in rows:
        t, e, w = r["n_b"] * tr, r["images"] * ev, r["whole_only_images"] * ev
        a = r["bound_images"] * ev
        total_t, total_e, total_w, total_a = total_t + t, total_e + e, total_w + w, total_a + a
        table.append([r["b"], r["n_b"], r["near_points"], r["images"], t, e, e / (t + e),
                      w / (t + w), r["bound_images"], a / (t + a)])  # fmt: skip
    pct = "{:.1%}"
    lines = [
        "# Estimate cost: the floor of sequential looks",
        "",
        "The issue-34 CIFAR estimate (dense, recorded; benchmarks/research/estimate_floor.py's "
        f"docstring). Measured: {tr * 1e3:.2f} ms per training sample, {ev * 1e3:.3f} ms per "
        "held-out image evaluated the sparse way (the recording pass).",
        "",
        H.md_table(head, table, fmt=[None] * 4 + ["{:.1f}", "{:.1f}", pct, pct, None, pct]),
        "",
        f"Floor in total: {total_t + total_e:.1f} s, evaluation {total_e / (total_t + total_e):.1%} "
        f"of it ({total_w / (total_t + total_w):.1%} with whole evaluations only). Under any "
        f"test (the oracle-sized one): evaluation {total_a / (total_t + total_a):.1%}.",
        "",
    ]
    return write_md(args.out / "estimate_floor.md", "\n".join(lines))


def write_md(path: Path, text: str) -> int:
    """Write and print a benchmark's results page; main's exit code."""
    H.write_text(path, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
