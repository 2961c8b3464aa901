"""Benchmark: what a device run spends evaluating, dense vs sparse, side by side.

Every job trains one configuration on the simulated Jetson Nano (training real, on the
CPU, one torch thread; the device's time is its model's), once with
`eval_schedule="dense"` (the whole held-out split at every grid point) and once with
"sparse" (train/loop/evalplan.py, the default), and reports for each: the evaluation's
device time as a share of the training's, whole evaluations and screened items (items
scored by sequential looks that stopped early), and
the time to accuracy (sparse must report dense's grid point and time). Then, from the
dense run's curve, a floor no exact schedule goes under: an oracle that skips every
grid point more than the far gap (0.05) below the target for free still looks at
each one within it before the crossing, and scores the whole split at the crossing;
where the split is one evaluation batch (512 items on the device) a look is the whole
split, elsewhere at least its first batch.

Jobs:
* demo: `make demo`'s run (small CNN on scikit-learn's digits, 1438 train / 359
  held-out, b = 64 at 768 MHz under 3.5 W, b_max 256, target 0.9, every 128 samples).
* mnist, cifar-a, shakespeare: the proxy-sensitivity matrix's jobs
  (benchmarks/matrix_data.py: images 4000 train / 500 held-out every 512 samples, b =
  64 of 16..256; text 9000 windows / 300 held-out every 256 samples, b = 32 of
  16..128, pre-trained on WikiText-2 as the matrix is).
* cifar-2000: small CNN on the whole CIFAR-10 quarter (2500 held-out images) at the
  device's default grid (every 2,000 samples), target 0.45, b = 64 of 16..128.

    .venv/bin/python benchmarks/device_eval_cost.py        # ~10 min on 2 cores
    .venv/bin/python benchmarks/device_eval_cost.py --jobs demo
Writes benchmarks/results/device_eval_cost.md and .csv. Jobs that need data/ (python
scripts/make_data.py all) are skipped (said so) without it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import harness as H

OUT = H.RESULTS
JOBS = ("demo", "mnist", "cifar-a", "shakespeare", "cifar-2000")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=H.DATA)
    p.add_argument("--jobs", default=",".join(JOBS), help="comma list of " + ", ".join(JOBS))
    p.add_argument("--out", type=Path, default=OUT)
    return p.parse_args(argv)


def job(name: str, data_dir: Path) -> tuple[Any, dict[str, Any]] | None:
    """(splits, train_on_device keywords) of a job; None without its data."""
    import matrix_data as M

    from undercap.data.spec import DataSpec, load_splits

    if name == "demo":
        kw = dict(batch_size=64, freq_mhz=768.0, power_limit_w=3.5, max_batch_size=256,
                  target_accuracy=0.9, max_samples=20_000, eval_every_samples=128)  # fmt: skip
        return load_splits(DataSpec("digits")), {"model": "small-cnn", **kw}
    if name == "cifar-2000":
        if not (data_dir / "images" / "cifar10-quarter-a.npz").exists():
            return None
        spec = DataSpec("npz:images/cifar10-quarter-a.npz", data_dir=str(data_dir))
        kw = dict(batch_size=64, freq_mhz=921.6, max_batch_size=128, target_accuracy=0.45,
                  max_samples=60_000, eval_every_samples=2_000)  # fmt: skip
        return load_splits(spec), {"model": "small-cnn", **kw}
    ds = M.DATASETS[name]
    if any(not (data_dir / f).exists() for f in ds.needs):
        return None
    mod = M.MODALITIES[ds.modality]
    from undercap.artifacts.cache import Cache

    weights = M.pretrained_weights(mod, data_dir, Cache(H.CACHE))
    b = 32 if ds.modality == "text" else 64
    kw = dict(batch_size=b, freq_mhz=921.6, max_batch_size=max(mod.batch_sizes),
              target_accuracy=ds.target_accuracy, max_samples=mod.max_samples,
              eval_every_samples=ds.eval_every, eval_max_samples=ds.eval_max,
              pretrained=weights)  # fmt: skip
    return load_splits(M.data_spec(ds, data_dir)), {"model": mod.model, **kw}


def measure(data: Any, kw: dict[str, Any], schedule: str) -> dict[str, Any]:
    from undercap.devices.simulated import SimulatedDevice
    from undercap.train import train_on_device

    dev = SimulatedDevice.from_name("jetson-nano", seed=0)
    model, rest = kw["model"], {k: v for k, v in kw.items() if k != "model"}
    elapsed = H.stopwatch()
    r = train_on_device(dev, model, data, progress=False, torch_device="cpu",
                        eval_schedule=schedule, **rest)  # fmt: skip
    ev = r.evaluation or {}
    return {
        "schedule": schedule,
        "host_s": elapsed(),
        "samples_to_target": r.samples_to_target,
        "time_to_accuracy_s": r.time_to_accuracy_s,
        "train_time_s": r.train_time_s,
        "eval_time_s": r.eval_time_s,
        "eval_share": (r.eval_time_s or 0.0) / r.train_time_s,
        "full_evaluations": ev.get("full_evaluations"),
        "screened_items": ev.get("screened_items"),
        "held_out": data.n_test if kw.get("eval_max_samples") is None else kw["eval_max_samples"],
        "grid": kw["eval_every_samples"],
        "curve": r.curve,
        "target": r.target_accuracy,
    }


def floor(dense: dict[str, Any]) -> dict[str, Any]:
    """The floor row (module docstring) from a dense run's measure()."""
    from undercap import defaults

    curve, target = dense["curve"], dense["target"]
    per_eval_s = (dense["eval_time_s"] or 0.0) / len(curve)
    batches = -(-dense["held_out"] // defaults.TRAIN_EVAL_BATCH)
    line = target - defaults.ESTIMATE_SPARSE_FAR_GAP
    before = [p for p in curve if p["samples"] < (dense["samples_to_target"] or 0)]
    near = sum(line <= p["accuracy"] < target for p in before)
    eval_s = near * per_eval_s / batches + per_eval_s
    return dict(dense, schedule="floor", host_s=None, eval_time_s=eval_s,
                eval_share=eval_s / dense["train_time_s"],
                full_evaluations=near + 1 if batches == 1 else 1,
                screened_items=0 if batches == 1 else near * defaults.TRAIN_EVAL_BATCH)  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    head = ["job", "held-out", "grid", "schedule", "samples to target", "time to accuracy (s)",
            "evaluation / training", "whole evaluations", "screened items"]  # fmt: skip
    keys = ["job", "held_out", "grid", "schedule", "samples_to_target", "time_to_accuracy_s",
            "eval_share", "full_evaluations", "screened_items"]  # fmt: skip
    tta = lambda t: "-" if t is None else f"{t:.3f}"  # noqa: E731
    return H.md_table(head, [[r[k] for k in keys] for r in rows], fmt=[None] * 5 + [tta, "{:.1%}"])


def main(argv: list[str] | None = None) -> int:
    import torch

    torch.set_num_threads(1)
    args = parse_args(argv)
    rows, skipped = [], []
    for name in args.jobs.split(","):
        made = job(name, args.data_dir)
        if made is None:
            skipped.append(name)
            print(f"{name}: skipped (no data under {args.data_dir})", file=sys.stderr)
            continue
        data, kw = made
        pair = [dict(job=name, **measure(data, kw, s)) for s in ("dense", "sparse")]
        d, s = pair
        same = (d["samples_to_target"], d["time_to_accuracy_s"]) == (
            s["samples_to_target"],
            s["time_to_accuracy_s"],
        )
        print(
            f"{name}: eval {d['eval_share']:.1%} -> {s['eval_share']:.1%} of training, "
            f"time to accuracy {'the same' if same else 'DIFFERS'}",
            file=sys.stderr,
        )
        rows += [dict(r, same_time_to_accuracy=same) for r in (*pair, floor(d))]
    if not rows:
        return 0
    rows = [{k: v for k, v in r.items() if k != "curve"} for r in rows]
    # csv's own line ends (\r\n), as the committed file has them
    H.write_csv(args.out / "device_eval_cost.csv", rows, lineterminator="\r\n")
    md = table(rows)
    if skipped:
        md += f"\n\nSkipped (no data): {', '.join(skipped)}."
    H.write_text(
        args.out / "device_eval_cost.md",
        "# Device evaluation, dense vs sparse (simulated Jetson Nano)\n\n"
        "Produced by `benchmarks/device_eval_cost.py`. Device times are the simulated "
        "Nano's model; evaluation is not charged to training. Floor: the least any "
        "schedule that reports dense's time to accuracy can evaluate (the script's "
        "docstring).\n\n" + md + "\n",
    )
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
