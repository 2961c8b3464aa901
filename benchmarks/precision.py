"""Mixed precision on the simulated boards: `run --precision auto` against fp32.

    .venv/bin/python benchmarks/precision.py            # about 10 min on 2 cores

The demo's job (scripts/demo.sh: the small CNN, digits with the 360-item proxy at split
seed 1, b = 8..256, target 0.9, 20,000 samples, on the CPU) on every simulated board,
under a cap halfway between the lowest and the highest peak of that board's fp32
profile (a full sweep, so the cap binds and leaves room). For each board and training
seed, `undercap run` with `--precision fp32` and with `--precision auto`, side by side:
the time to accuracy (`train.json`'s `train_time_s`, the board's virtual clock), the
precision the selection names, and cap violations (`limit_exceeded`, guard events).
Also `--precision bf16` on the Nano, which has none: exit code 2 and one line.

What is assumed, not measured: the boards' fp16/bf16 rates are their vendors' peak
figures (FP16x2 on the Nano's and TX2 NX's CUDA cores; Tensor Cores on Xavier NX and
Orin Nano), the share of that peak training reaches on Tensor Cores (0.35) is an
estimate, and a 16-bit step draws the FP32 power at its clock while it computes: no
board's training power in fp16 was measured (devices/simulated/specs/*.toml). The
speed-ups are ratios on one simulated board, so a uniform error in its time scale
cancels; an error in the 16-bit rates does not.

Writes benchmarks/results/precision/demo.md and demo.csv.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import harness as H

BOARDS = ("sim:jetson-nano", "sim:jetson-tx2nx", "sim:jetson-xavier-nx", "sim:jetson-orin-nano")
#: the issue's goals: auto at least this many times sooner than fp32, per board
GOALS = {"sim:jetson-nano": 1.2, "sim:jetson-tx2nx": 1.2, "sim:jetson-xavier-nx": 1.5,
         "sim:jetson-orin-nano": 1.5}  # fmt: skip
JOB = ["--model", "small-cnn", "--proxy", "digits", "--proxy-limit", "360",
       "--proxy-split-seed", "1", "--target", "digits", "--batch-sizes", "8..256",
       "--target-accuracy", "0.9", "--max-samples", "20000", "--eval-every", "128",
       "--estimate-seeds", "3", "--torch-device", "cpu", "--no-progress"]  # fmt: skip


def undercap(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "undercap.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=H.REPO)


def halfway_cap(board: str, work: Path) -> tuple[float, float, float]:
    """(cap, lowest peak, highest peak) of the job's fp32 full profile on `board`."""
    out = work / f"profile-{board[4:]}.json"
    proc = undercap("profile", "--device", board, "--model", "small-cnn", "--input-shape",
                    "1x8x8", "--batch-sizes", "8..256", "--no-progress", "-o", str(out))  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    peaks = [
        r["peak_power_w"] + (r.get("peak_margin_w") or 0.0)
        for r in json.loads(out.read_text())["rows"]
    ]
    lo, hi = min(peaks), max(peaks)
    return round((lo + hi) / 2, 2), lo, hi


def one_run(board: str, cap: float, precision: str, seed: int, work: Path) -> dict:
    out = work / f"{board[4:]}-{precision}-s{seed}"
    proc = undercap("run", "--device", board, *JOB, "--power-limit", str(cap), "--seed",
                    str(seed), "--precision", precision, "--cache-dir", str(work / "cache"),
                    "-o", str(out))  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"{board} {precision}: {proc.stderr[-2000:]}")
    train = json.loads((out / "train.json").read_text())
    sel = json.loads((out / "selection.json").read_text())
    return {
        "board": board, "cap_w": cap, "asked": precision, "seed": seed,
        "precision": sel["precision"], "host_precision": train.get("host_precision"),
        "batch_size": sel["batch_size"], "freq_mhz": sel["freq_mhz"],
        "train_time_s": train["train_time_s"], "reached": train["reached"],
        "peak_power_w": train["peak_power_w"], "limit_exceeded": train["limit_exceeded"],
        "guard_events": len(train["guard_events"]),
    }  # fmt: skip


def bf16_on_the_nano(work: Path) -> str:
    proc = undercap("run", "--device", "sim:jetson-nano", *JOB, "--power-limit", "3.5",
                    "--precision", "bf16", "-o", str(work / "nano-bf16"))  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    return f"exit code {proc.returncode}, {len(lines)} line(s): `{lines[-1] if lines else ''}`"


def table(rows: list[dict], caps: dict) -> str:
    out = []
    for board in caps:
        mine = [r for r in rows if r["board"] == board]
        fp32 = {r["seed"]: r for r in mine if r["asked"] == "fp32"}
        auto = {r["seed"]: r for r in mine if r["asked"] == "auto"}
        ratios = [fp32[s]["train_time_s"] / auto[s]["train_time_s"] for s in sorted(fp32)]
        over = sum(r["limit_exceeded"] for r in mine)
        a = auto[min(auto)]
        f = fp32[min(fp32)]
        out.append([board[4:], f"{caps[board][0]:g} W ({caps[board][1]:.2f}..{caps[board][2]:.2f})",
                    f"{f['batch_size']} @ {f['freq_mhz']:g}", f"{a['batch_size']} @ {a['freq_mhz']:g} {a['precision']}",
                    " / ".join(f"{x:.2f}x" for x in ratios), f"{min(ratios):.2f}x",
                    f"{GOALS[board]:g}x: {'met' if min(ratios) >= GOALS[board] else 'not met'}", over])  # fmt: skip
    header = ["board", "cap (fp32 peaks)", "fp32: b @ MHz", "auto: b @ MHz, precision",
              "fp32 / auto time, per seed", "lowest", "goal", "runs over the cap"]  # fmt: skip
    return H.md_table(header, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="training seeds per board and precision")
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--out", type=Path, default=H.RESULTS / "precision")
    args = ap.parse_args(argv)
    elapsed = H.stopwatch()
    rows, caps = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for board in args.boards.split(","):
            caps[board] = halfway_cap(board, work)
            for precision in ("fp32", "auto"):
                for seed in range(args.seeds):
                    rows.append(one_run(board, caps[board][0], precision, seed, work))
                    print(f"  {rows[-1]}", file=sys.stderr)
        nano = bf16_on_the_nano(work)
    text = "\n".join([
        "# Mixed precision on the simulated boards (SIMULATED)", "",
        f"`.venv/bin/python benchmarks/precision.py` ({elapsed():.0f} s; the demo's job, "
        "`undercap run --precision fp32` and `--precision auto` side by side, training seeds "
        f"0..{args.seeds - 1}; time to accuracy on each board's virtual clock).", "",
        table(rows, caps), "",
        f"`run --device sim:jetson-nano --precision bf16`: {nano}.", "",
    ])  # fmt: skip
    H.write_text(args.out / "demo.md", text)
    H.write_csv(args.out / "demo.csv", rows)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
