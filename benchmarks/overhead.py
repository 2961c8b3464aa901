"""Benchmark: what undercap's instrumentation costs per training step on the host.

`train_on_device` on a SIMULATED Jetson Nano (clock locked, power sampled, the power
guard judging windows, device time and energy accounted every step) against a bare
PyTorch loop with the same model, data, batch size, optimizer and data order, side by
side in one run on the CPU with one thread.

Per-step time is a difference: each side runs N1 and N2 steps and (T(N2) - T(N1)) /
(N2 - N1) cancels what both do once (building the model, the one evaluation at the
end); the runs are interleaved (bare and undercap, alternating which goes first) so drifts of the
machine hit both alike, and the median over repetitions is reported with the ratio
undercap / bare. Target: at most 1.03.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/overhead.py [--reps 5]
Writes benchmarks/results/overhead.md and overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

# model, input shape, batch size, (N1, N2) steps
CASES = [
    ("small-cnn", (1, 8, 8), 32, (200, 2200)),
    ("resnet18", (3, 32, 32), 32, (3, 23)),
]


def bare(model_name: str, data, batch_size: int, steps: int, seed: int = 0) -> float:
    """The same training steps in plain PyTorch: seconds of wall time."""
    import torch
    import torch.nn.functional as F

    from undercap.models import build_model
    from undercap.models.registry import model_spec

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    model = build_model(model_name, num_classes=data.num_classes, input_shape=data.input_shape)
    opt = torch.optim.Adam(model.parameters(), lr=model_spec(model_name).base_lr)
    gen = torch.Generator().manual_seed(seed)
    perm, pos = torch.randperm(data.n_train, generator=gen), 0
    for _ in range(steps):
        if pos + batch_size > data.n_train:
            perm, pos = torch.randperm(data.n_train, generator=gen), 0
        idx = perm[pos : pos + batch_size]
        pos += batch_size
        x, y = data.x_train[idx], data.y_train[idx]
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    with torch.no_grad():  # the one evaluation train_on_device also makes
        model.eval()
        model(data.x_test[:64])
    return time.perf_counter() - t0


def instrumented(model_name: str, data, batch_size: int, steps: int, seed: int = 0) -> float:
    """train_on_device on the simulated Nano for `steps` steps: seconds of wall time."""
    from undercap.devices.simulated import SimulatedDevice
    from undercap.train import train_on_device

    t0 = time.perf_counter()
    result = train_on_device(
        SimulatedDevice.from_name("jetson-nano", seed=seed),
        model_name,
        data,
        batch_size=batch_size,
        target_accuracy=1.0,
        freq_mhz=921.6,
        power_limit_w=100.0,  # the guard runs, and judges every window, but never acts
        max_samples=steps * batch_size,
        eval_every_samples=steps * batch_size,
        eval_max_samples=64,
        seed=seed,
        progress=False,
        torch_device="cpu",
    )
    assert result.steps == steps
    return time.perf_counter() - t0


def session_only(model_name: str, data, batch_size: int, steps: int) -> float:
    """What undercap adds to each step, alone: a training session on the simulated Nano
    (account the step, advance the virtual clock, sample, judge the guard) with no
    training in between. Seconds of wall time for `steps` steps."""
    from undercap.devices.simulated import SimulatedDevice
    from undercap.models import build_model, workload_of
    from undercap.train.session import Session

    model = build_model(model_name, num_classes=data.num_classes, input_shape=data.input_shape)
    wl = workload_of(model, model_name, data.input_shape)
    device = SimulatedDevice.from_name("jetson-nano")
    with Session(device, power_limit_w=100.0, freq_mhz=921.6, workload=wl) as session:
        t0 = time.perf_counter()
        for _ in range(steps):
            session.step(batch_size)
        return time.perf_counter() - t0


def main() -> int:
    import torch

    from undercap.data import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--models", default=",".join(c[0] for c in CASES))
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for model, shape, b, (n1, n2) in (c for c in CASES if c[0] in args.models.split(",")):
        data = load_dataset("digits", input_shape=shape)
        bare(model, data, b, n1)  # warm caches (allocator, first kernels)
        instrumented(model, data, b, n1)
        runs: dict = {(fn, n): [] for fn in ("bare", "undercap") for n in (n1, n2)}
        for rep in range(args.reps):  # interleaved, alternating which side goes first
            for n in (n1, n2):
                sides = [("bare", bare), ("undercap", instrumented)]
                for name, fn in sides if rep % 2 == 0 else sides[::-1]:
                    runs[(name, n)].append(fn(model, data, b, n))
        # The fastest of the repetitions is the least disturbed by other processes
        # (a shared 2-core machine); the difference of two run lengths is per step.
        per = {
            fn: (min(runs[(fn, n2)]) - min(runs[(fn, n1)])) / (n2 - n1)
            for fn in ("bare", "undercap")
        }
        med = {
            fn: (statistics.median(runs[(fn, n2)]) - statistics.median(runs[(fn, n1)])) / (n2 - n1)
            for fn in ("bare", "undercap")
        }
        alone = min(session_only(model, data, b, n2 - n1) for _ in range(3)) / (n2 - n1)
        row = {
            "model": model,
            "input_shape": list(shape),
            "batch_size": b,
            "steps": [n1, n2],
            "reps": args.reps,
            "bare_ms_per_step": 1e3 * per["bare"],
            "undercap_ms_per_step": 1e3 * per["undercap"],
            "ratio": per["undercap"] / per["bare"],
            "ratio_of_medians": med["undercap"] / med["bare"],
            "session_only_ms_per_step": 1e3 * alone,
            "session_only_ratio": 1.0 + alone / per["bare"],
            "wall_s": {f"{fn}@{n}": v for (fn, n), v in runs.items()},
        }
        rows.append(row)
        print(f"{model}: bare {row['bare_ms_per_step']:.3f} ms/step, undercap "
              f"{row['undercap_ms_per_step']:.3f} ms/step, ratio {row['ratio']:.3f}")  # fmt: skip
    out = REPO / "benchmarks" / "results"
    (out / "overhead.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# Instrumentation overhead per training step (host CPU, one thread)",
        "",
        "`train_on_device` on the SIMULATED Jetson Nano vs a bare PyTorch loop with the same "
        "model, data (scikit-learn digits), batch size, optimizer and data order; per-step "
        "wall time from the difference of two run lengths (the fastest of "
        f"{args.reps} interleaved repetitions each; the ratio of medians beside it).",
        "",
        "| model | input | batch | bare (ms/step) | undercap (ms/step) | ratio | ratio of medians "
        "| session alone (ms/step) | 1 + session / bare |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {'x'.join(map(str, r['input_shape']))} | {r['batch_size']} "
            f"| {r['bare_ms_per_step']:.3f} | {r['undercap_ms_per_step']:.3f} | {r['ratio']:.3f} "
            f"| {r['ratio_of_medians']:.3f} | {r['session_only_ms_per_step']:.4f} "
            f"| {r['session_only_ratio']:.4f} |"
        )
    lines += [
        "",
        "`session alone`: the per-step work undercap adds (account the step on the "
        "simulated device, advance its virtual clock, judge the power guard), timed with "
        "no training in between; `1 + session / bare` is the overhead it implies, free of "
        "the run-to-run noise of a shared machine that the side-by-side ratios carry.",
        "",
        "Reproduce: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/overhead.py`.",
    ]
    (out / "overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
