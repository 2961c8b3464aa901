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
import statistics
import sys
import time

import harness as H

# model, input shape, batch size, (N1, N2) steps
CASES = [
    ("small-cnn", (1, 8, 8), 32, (200, 3200)),
    ("resnet18", (3, 32, 32), 32, (3, 23)),
]


def _clock() -> tuple[float, float]:
    """Wall and CPU time (the harness's stopwatch is wall time only)."""
    return time.perf_counter(), time.process_time()


def _since(t0: tuple[float, float]) -> tuple[float, float]:
    """Wall and CPU seconds since `t0`: on a shared machine the process's CPU time
    leaves out the time other processes held the core."""
    wall, cpu = _clock()
    return wall - t0[0], cpu - t0[1]


def bare(model_name: str, data, batch_size: int, steps: int, seed: int = 0) -> float:
    """The same training steps in plain PyTorch: seconds of wall time."""
    import torch
    import torch.nn.functional as F

    from undercap.models import build_model
    from undercap.models.registry import model_spec

    t0 = _clock()
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
    return _since(t0)


def instrumented(model_name: str, data, batch_size: int, steps: int, seed: int = 0) -> float:
    """train_on_device on the simulated Nano for `steps` steps: seconds of wall time."""
    from undercap.devices.simulated import SimulatedDevice
    from undercap.train import train_on_device

    t0 = _clock()
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
    return _since(t0)


def session_only(model_name: str, data, batch_size: int, steps: int) -> float:
    """What undercap adds to each step, alone: a training session on the simulated Nano
    (account the step, advance the virtual clock, sample, judge the guard) with no
    training in between. Seconds of wall time for `steps` steps."""
    from undercap.devices.simulated import SimulatedDevice
    from undercap.models import build_model, workload_of
    from undercap.train.cap import FixedCap
    from undercap.train.session import Session

    model = build_model(model_name, num_classes=data.num_classes, input_shape=data.input_shape)
    wl = workload_of(model, model_name, data.input_shape)
    device = SimulatedDevice.from_name("jetson-nano")
    cap = FixedCap(100.0)  # the guard judges every window but never acts, as in instrumented()
    with Session(device, cap, freq_mhz=921.6, workload=wl, batch_size=batch_size) as session:
        t0 = _clock()
        for _ in range(steps):
            session.step(batch_size)
        return _since(t0)[0]


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
        per: dict = {(fn, k): [] for fn in ("bare", "undercap") for k in (0, 1)}
        for rep in range(args.reps):  # interleaved, alternating which side goes first
            sides = [("bare", bare), ("undercap", instrumented)]
            for name, fn in sides if rep % 2 == 0 else sides[::-1]:
                short, long = fn(model, data, b, n1), fn(model, data, b, n2)
                for k in (0, 1):  # wall, CPU: per step from this repetition's pair
                    per[(name, k)].append((long[k] - short[k]) / (n2 - n1))
        med = {key: statistics.median(v) for key, v in per.items()}
        alone = min(session_only(model, data, b, n2 - n1) for _ in range(3)) / (n2 - n1)
        row = {
            "model": model,
            "input_shape": list(shape),
            "batch_size": b,
            "steps": [n1, n2],
            "reps": args.reps,
            "bare_ms_per_step": 1e3 * med[("bare", 0)],
            "undercap_ms_per_step": 1e3 * med[("undercap", 0)],
            "ratio": med[("undercap", 0)] / med[("bare", 0)],
            "cpu_ratio": med[("undercap", 1)] / med[("bare", 1)],
            "ratio_per_rep": [
                u / k for u, k in zip(per[("undercap", 0)], per[("bare", 0)], strict=True)
            ],
            "session_only_ms_per_step": 1e3 * alone,
            "session_only_ratio": 1.0 + alone / med[("bare", 0)],
        }
        rows.append(row)
        print(f"{model}: bare {row['bare_ms_per_step']:.3f} ms/step, undercap "
              f"{row['undercap_ms_per_step']:.3f} ms/step, ratio {row['ratio']:.3f}")  # fmt: skip
    H.write_json(H.RESULTS / "overhead.json", rows, indent=1)
    lines = [
        "# Instrumentation overhead per training step (host CPU, one thread)",
        "",
        "`train_on_device` on the SIMULATED Jetson Nano vs a bare PyTorch loop with the same "
        "model, data (scikit-learn digits), batch size, optimizer and data order; per-step "
        "time from the difference of two run lengths in one repetition, median of "
        f"{args.reps} interleaved repetitions; wall-clock time, and the process's CPU time "
        "(which leaves out the time other processes held the core).",
        "",
        H.md_table(
            ["model", "input", "batch", "bare (ms/step)", "undercap (ms/step)", "ratio (wall)",
             "ratio (CPU)", "session alone (ms/step)", "1 + session / bare"],
            [[r["model"], "x".join(map(str, r["input_shape"])), r["batch_size"],
              r["bare_ms_per_step"], r["undercap_ms_per_step"], r["ratio"], r["cpu_ratio"],
              r["session_only_ms_per_step"], r["session_only_ratio"]] for r in rows],
            fmt=[None] * 3 + ["{:.3f}"] * 4 + ["{:.4f}"] * 2,
        ),
    ]  # fmt: skip
    lines += [
        "",
        "`session alone`: the per-step work undercap adds (account the step on the "
        "simulated device, advance its virtual clock, judge the power guard), timed with "
        "no training in between; `1 + session / bare` is the overhead it implies, free of "
        "the run-to-run noise of a shared machine that the side-by-side ratios carry.",
        "",
        "Reproduce: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/overhead.py`.",
    ]
    H.write_text(H.RESULTS / "overhead.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
