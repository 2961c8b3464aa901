"""Benchmark: would a look that reads its items against the run's last whole
evaluation need fewer of them? From a dense estimate's own per-item records.

The idea (tried, not built): the held-out split is fixed and a run's looks read it in
one order, so a look at grid point g could score its first m items and difference
them against the same items at the last whole evaluation g0, d_i = c_i(g) - c_i(g0):
the whole split's metric at g is then the one at g0 plus N mean(d) / K (K the split's
predictions), the difference estimator (Cochran, Sampling Techniques, 3rd ed. 1977,
Sec. 7.1), with the one-sided Student t margin of d's spread. It pays if few items
change between near grid points, so that d spreads far less than the items.

Records a dense estimate of benchmarks/estimate_cost.py's `cifar` and `text` jobs
(one torch thread), keeping at every whole evaluation each held-out item's correct
predictions (Objective.items, in the order a look scores them, from the same forward
pass). Then, per run, over the grid points from the first within the far gap (0.05)
of the target to N(b), the floor's setting (research/estimate_floor.py: far points
skipped for free): the items a sequential look needs to rule each point out
(train/loop/evalplan.Check at the estimate's checks and z, the windows' spread on text),
the whole split where none can, beside the same with the difference estimator in
place of the items' spread from 30 items on, its control the last look that ran
whole (the point before the first near one to start). Also: the share of items whose
score changed between consecutive grid points, and the spread of the items and of d.

Research (tried, not built: benchmarks/research/README.md).

    .venv/bin/python benchmarks/research/estimate_paired.py     # ~25 min on one core
Writes benchmarks/results/research/estimate_paired.md. Skips (exit 0) without the data.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness as H  # noqa: E402

JOBS = ("cifar", "text")

#: a run's whole evaluations: (samples, metric, hits per item, predictions per item)
Points = list[tuple[int, float, Any, Any]]


def record(job: str, data_dir: Path) -> tuple[dict[int, Points], dict[int, int], float]:
    """The dense estimate of `job` with each whole evaluation's items by b; N(b); target."""
    import dataclasses

    import estimate_cost as E
    import torch

    import undercap.train.loop as L
    from undercap.estimate import estimate
    from undercap.train.loop.scoring import make_objective

    runs: dict[int, Points] = {}
    real = L.Trainer.evaluate

    def evaluate(self: Any) -> Any:
        obj, seen = self.objective or make_objective(), []

        def score(out: Any, y: Any) -> Any:  # the items of the same forward pass
            seen.append(obj.items(out, y))
            return obj.score(out, y)

        self.objective = dataclasses.replace(obj, score=score)
        try:
            point = real(self)
        finally:
            self.objective = obj
        hits, preds = (torch.cat(t).numpy() for t in zip(*seen, strict=True))
        runs.setdefault(self.cfg.batch_size, []).append((self.samples, point.accuracy, hits, preds))
        return point

    L.Trainer.evaluate = evaluate
    try:
        cfg = E.configs(job, data_dir)
        eff = estimate(cfg, cache_dir=None, torch_device="cpu", progress=False, threads=1,
                       log=lambda _m: None)  # fmt: skip
    finally:
        L.Trainer.evaluate = real
    n = {int(b): r[0] for b, r in eff.samples_to_target.items()}
    return runs, n, float(cfg.target_accuracy)


def look_items(hits: Any, preds: Any, threshold: float, control: Any, every: int, z: float) -> int:
    """Items a look needs before a check rules the point out (the whole split: none
    can): the estimate's own check (train/loop/evalplan.Check, the windows' spread from
    objective.ItemSpread); with a `control` (hits at the last whole look), from
    SPREAD_MIN_ITEMS on, the difference estimator's t bound in place of the spread."""
    import torch

    from undercap.train.loop.evalplan import LAST_CHECK, SPREAD_MIN_ITEMS, Check, t_quantile
    from undercap.train.loop.scoring import ItemSpread

    n, total = len(hits), float(preds.sum())
    check = Check(threshold, n, every, z)
    for m in range(every, int(LAST_CHECK * n) + 1, every):
        c, k = hits[:m], preds[:m]
        mean = float(c.sum() / k.sum())
        if control is None or m < SPREAD_MIN_ITEMS:
            items = ItemSpread()
            items.add(torch.from_numpy(c), torch.from_numpy(k))
            if check(mean, m, items.sd()):
                return m
            continue
        check(mean, m)  # the bound and the rest-all-right cap, without the spread
        d = c - control[:m]
        paired = float(control.sum()) / total + n * float(d.mean()) / total
        fpc = (n - m) / (n - 1)
        paired += t_quantile(z, m - 1) * n / total * float(d.std(ddof=1)) * math.sqrt(fpc / m)
        if min(check.upper(threshold), paired) < threshold:
            return m
    return n


def run_row(b: int, points: Points, n_b: int, target: float) -> dict[str, Any]:
    """One run's near-phase items, plain and paired, and how its items change."""
    from undercap import defaults
    from undercap.estimate.runs import MIN_CHECKS
    from undercap.train.loop.evalplan import LAST_CHECK, check_count, check_z

    points = [p for p in points if p[0] <= n_b]
    n = len(points[0][2])
    every = defaults.ESTIMATE_CHECK_SAMPLES
    if check_count(n, every) < MIN_CHECKS:  # estimate/runs._effective_sparse
        every = int(LAST_CHECK * n) // MIN_CHECKS
    z = check_z(n, every, defaults.ESTIMATE_LOOK_ERROR)
    line = target - defaults.ESTIMATE_SPARSE_FAR_GAP
    first = next(i for i, p in enumerate(points) if p[1] >= line or p[0] == n_b)
    control = points[first - 1][2] if first > 0 else None
    plain = paired = 0
    for _, _, hits, preds in points[first:-1]:
        plain += look_items(hits, preds, target, None, every, z)
        m = look_items(hits, preds, target, control, every, z)
        paired += m
        control = hits if m == n else control
    pairs = list(zip(points, points[1:], strict=False))
    per = float(points[0][3].mean())
    return {
        "b": b, "n_b": n_b, "near": len(points) - 1 - first, "items": n,
        "plain": plain + n, "paired": paired + n,
        "changed": statistics.median(float((q[2] != p[2]).mean()) for p, q in pairs),
        "sd_items": statistics.median(float(q[2].std(ddof=1)) / per for _, q in pairs),
        "sd_d": statistics.median(float((q[2] - p[2]).std(ddof=1)) / per for p, q in pairs),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from estimate_floor import args_or_skip, write_md

    args = args_or_skip(__doc__, argv, JOBS)
    if args is None:
        return 0
    head = ["job", "b", "N(b)", "points before N(b) from the first near one", "held-out items",
            "items, own check", "items, against the last whole look", "saved", "items changed",
            "spread items / d"]  # fmt: skip
    table: list[list[Any]] = []
    for job in args.jobs.split(","):
        runs, n_b, target = record(job, args.data_dir)
        rows = [run_row(b, runs[b], n_b[b], target) for b in sorted(runs)]
        new = [[job, r["b"], r["n_b"], r["near"], r["items"], r["plain"], r["paired"],
                f"{1 - r['paired'] / r['plain']:.1%}", f"{r['changed']:.1%}",
                f"{r['sd_items']:.3f} / {r['sd_d']:.3f}"] for r in rows]  # fmt: skip
        plain, paired = sum(r["plain"] for r in rows), sum(r["paired"] for r in rows)
        new.append([job, "all", "", "", "", plain, paired, f"{1 - paired / plain:.1%}", "", ""])
        table += new
        print("\n".join(H.md_table(head, table).splitlines()[-len(new) :]), flush=True)
    lines = [
        "# Estimate cost: looks read against the last whole evaluation",
        "",
        "benchmarks/research/estimate_paired.py (its docstring): items the looks from the first "
        "grid point within 0.05 of the target to N(b) score (N(b)'s whole split included), each "
        "look on its own (the estimate's check) and read against the last whole look "
        "(difference estimator); medians over consecutive grid points of the share of "
        "items whose score changed and of the spread (per prediction) of the items and of "
        "their differences.",
        "",
        H.md_table(head, table),
    ]
    return write_md(args.out / "estimate_paired.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
