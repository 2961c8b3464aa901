"""The table of benchmarks/estimate_cost_gpu.sh: per estimate its wall time, the runs'
train and evaluation seconds (summed over runs that share the GPU), the whole
evaluations and screened items, and N(b); the device `train`s' evaluation time."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import harness as H

HEAD = ["schedule", "pair", "rc", "wall s", "runs", "train s", "eval s", "eval share",
        "whole evaluations", "screened items", "N(b)"]  # fmt: skip


def records(folder: Path) -> list[dict]:
    out = [json.loads(p.read_text()) for p in folder.glob("**/value.json")]
    return sorted(
        (d for d in out if d.get("batch_size") is not None), key=lambda d: d["batch_size"]
    )


def row(out: Path, schedule: str, pair: str, rc: str, wall_s: float) -> list:
    recs = records(out / f"w-{schedule}-{pair}")
    train_s = sum(d["train_wall_s"] for d in recs)
    eval_s = sum(d["eval_wall_s"] for d in recs)
    full = sum(d.get("eval", {}).get("full_evals", len(d["curve"])) for d in recs)
    screened = sum(d.get("eval", {}).get("screened_items", 0) for d in recs)
    n_b = ", ".join(f"{d['batch_size']}: {d['samples_to_target']}" for d in recs)
    share = eval_s / (train_s + eval_s) if train_s + eval_s else 0.0
    return [schedule, pair, rc, wall_s, len(recs), train_s, eval_s, share, full, screened, n_b]


def main(out: Path) -> None:
    walls = list(csv.reader((out / "walls.csv").open()))
    rows = [row(out, s, pair, rc, float(w)) for s, pair, rc, w in sorted(walls, key=lambda r: (r[1], r[0]))]  # fmt: skip
    print(H.md_table(HEAD, rows, fmt=[None] * 3 + ["{:.1f}", None, "{:.1f}", "{:.1f}", "{:.1%}"]))
    for path in sorted(out.glob("train128-*")):
        d = json.loads(path.read_text())
        keys = ("time_to_accuracy_s", "train_time_s", "eval_time_s", "samples_to_target")
        share = (d.get("eval_time_s") or 0.0) / (d.get("train_time_s") or 1.0)
        print(f"\n{path.name}:", {k: d.get(k) for k in keys},
              f"eval/train {share:.1%}", d.get("evaluation"))  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
