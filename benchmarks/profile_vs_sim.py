"""A profile measured on a board, checked cell by cell against the simulator.

`undercap profile --device jetson --read-only ...` on a real Jetson writes t(b, f) and
P(b, f) for one model at every measured batch size and clock; this script predicts the
same cells with the simulated device of that board (the model's counted FLOPs and
bytes are in the profile) and writes the errors, a figure, and the profile as a
`trace:` file, so that a board's measurements check the simulator's frequency scaling,
batch-size effect and power at once, not one point per model as the published numbers
do (benchmarks/device_validation.py, which also reads every profile kept in
benchmarks/data/measured/profiles/).

    .venv/bin/python benchmarks/profile_vs_sim.py board-profile.json -o out/ [--sim NAME]

Writes out/profile-errors.csv, out/profile-vs-sim.png and, for a full sweep,
out/trace.csv (`--device trace:out/trace.csv` replays it). Errors are sim / measured - 1.
The board is read from the profile (the device tree's model string a Jetson profile
records, or the simulated device's name); `--sim` names it where it cannot be.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import harness as H

from undercap.artifacts.profile import Profile, load_profile
from undercap.artifacts.workload import Workload
from undercap.devices.simulated.model import SimSpec, load_spec, step_model
from undercap.devices.trace import COLUMNS as TRACE_COLUMNS
from undercap.errors import UndercapError

SPEC_DIR = H.REPO / "src" / "undercap" / "devices" / "simulated" / "specs"
CELL_COLUMNS = [
    "board", "sim_device", "model", "batch_size", "freq_mhz", "measured_time_s", "sim_time_s",
    "time_error", "measured_power_w", "sim_power_w", "power_error",
]  # fmt: skip

# Device-tree model strings (/proc/device-tree/model) -> bundled spec; the more
# specific names first ("Orin Nano" before "Nano"). Strings as L4T's device trees
# write them, e.g. "NVIDIA Jetson Nano Developer Kit", "NVIDIA Jetson Xavier NX
# Developer Kit", "NVIDIA Jetson Orin Nano Developer Kit", "NVIDIA Jetson TX2 NX".
_BOARD_NAMES = (
    ("orin nano", "jetson-orin-nano"),
    ("xavier nx", "jetson-xavier-nx"),
    ("tx2 nx", "jetson-tx2nx"),
    ("nano", "jetson-nano"),
)


@dataclass(frozen=True)
class Cell:
    """One (b, f) of the profile and the simulator's prediction for it."""

    batch_size: int
    freq_mhz: float
    measured_time_s: float  # per sample
    sim_time_s: float
    measured_power_w: float  # mean board input while stepping
    sim_power_w: float

    @property
    def time_error(self) -> float:
        return self.sim_time_s / self.measured_time_s - 1.0

    @property
    def power_error(self) -> float:
        return self.sim_power_w / self.measured_power_w - 1.0


def sim_board_of(profile: Profile) -> str:
    """The bundled simulated board a profile was measured on (or simulates)."""
    name = str(profile.device.get("name", ""))
    if name.startswith("sim:") and (SPEC_DIR / f"{name[4:]}.toml").is_file():
        return name[4:]
    board = str((profile.device.get("details") or {}).get("board") or "")
    for needle, spec in _BOARD_NAMES:
        if needle in board.lower():
            return spec
    known = ", ".join(sorted(p.stem for p in SPEC_DIR.glob("*.toml")))
    raise ValueError(
        f"cannot tell which simulated board matches {name or 'the device'!r}"
        f" (board {board or 'not recorded'!r}); name it with --sim ({known})"
    )


def compare_profile(profile: Profile, spec: SimSpec) -> list[Cell]:
    """Every measured (b, f) of the profile against the simulator."""
    if not profile.workload:
        raise ValueError("the profile records no workload (made before undercap 0.2?)")
    workload = Workload.from_dict(profile.workload)
    cells = []
    for r in sorted(profile.rows, key=lambda r: (r.batch_size, r.freq_mhz)):
        m = step_model(spec, workload, r.batch_size, r.freq_mhz)
        cells.append(
            Cell(r.batch_size, r.freq_mhz, r.time_per_sample_s, m.time_per_sample_s,
                 r.mean_power_w, m.power_w)
        )  # fmt: skip
    return cells


def summary(cells: Sequence[Cell]) -> dict[str, float]:
    """Median absolute errors, and how the time error drifts from the lowest to the
    highest clock and batch size (a drift means the simulator's f or b scaling is off
    even where its scale is right)."""

    def drift(key: str, error: str) -> float:
        values = sorted({getattr(c, key) for c in cells})
        lo = [getattr(c, error) for c in cells if getattr(c, key) == values[0]]
        hi = [getattr(c, error) for c in cells if getattr(c, key) == values[-1]]
        return statistics.median(hi) - statistics.median(lo)

    return {
        "cells": len(cells),
        "median_abs_time_error": statistics.median(abs(c.time_error) for c in cells),
        "median_abs_power_error": statistics.median(abs(c.power_error) for c in cells),
        "time_error_drift_over_f": drift("freq_mhz", "time_error"),
        "time_error_drift_over_b": drift("batch_size", "time_error"),
        "power_error_drift_over_f": drift("freq_mhz", "power_error"),
        "power_error_drift_over_b": drift("batch_size", "power_error"),
    }


def write_cells(cells: Sequence[Cell], board: str, sim: str, model: str, path: Path) -> None:
    rows = [{
        "board": board, "sim_device": f"sim:{sim}", "model": model,
        "batch_size": c.batch_size, "freq_mhz": c.freq_mhz,
        "measured_time_s": f"{c.measured_time_s:.6g}", "sim_time_s": f"{c.sim_time_s:.6g}",
        "time_error": f"{c.time_error:.4f}", "measured_power_w": f"{c.measured_power_w:.4g}",
        "sim_power_w": f"{c.sim_power_w:.4g}", "power_error": f"{c.power_error:.4f}",
    } for c in cells]  # fmt: skip
    H.write_csv(path, rows, CELL_COLUMNS)


def write_trace(profile: Profile, sim: str, path: Path) -> bool:
    """The profile as a `trace:` file, when every batch size was measured at every
    clock (a trace must be complete); False, and nothing written, otherwise."""
    have = {(r.batch_size, r.freq_mhz) for r in profile.rows}
    if len(have) != len(profile.batch_sizes) * len(profile.freqs_mhz):
        return False
    rows = [[sim, profile.model, r.batch_size, r.freq_mhz, repr(r.time_per_sample_s),
             repr(r.mean_power_w)]
            for r in sorted(profile.rows, key=lambda r: (r.batch_size, r.freq_mhz))]  # fmt: skip
    H.write_csv(path, rows, TRACE_COLUMNS)
    return True


def plot(cells: Sequence[Cell], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.6, 4.0))
    ax_t, ax_p = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for i, b in enumerate(sorted({c.batch_size for c in cells})):
        row = [c for c in cells if c.batch_size == b]
        f = [c.freq_mhz for c in row]
        colour = f"C{i % 10}"
        ax_t.plot(f, [c.sim_time_s * 1e3 for c in row], "-", color=colour, label=f"b={b}")
        ax_t.plot(f, [c.measured_time_s * 1e3 for c in row], "o", color=colour)
        ax_p.plot(f, [c.sim_power_w for c in row], "-", color=colour)
        ax_p.plot(f, [c.measured_power_w for c in row], "o", color=colour)
    ax_t.set(xlabel="GPU clock (MHz)", ylabel="time per sample (ms)", yscale="log")
    ax_p.set(xlabel="GPU clock (MHz)", ylabel="mean board power (W)")
    ax_t.legend(fontsize=8, title="dots: measured, lines: simulated", title_fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120, bbox_inches="tight")


def run(profile_path: Path, out: Path, sim: str | None = None) -> dict[str, float]:
    profile = load_profile(profile_path)
    sim = sim or sim_board_of(profile)
    spec_path = SPEC_DIR / f"{sim}.toml"
    if not spec_path.is_file():
        raise ValueError(f"no simulated board {sim!r} (specs in {SPEC_DIR})")
    cells = compare_profile(profile, load_spec(spec_path))
    board = str((profile.device.get("details") or {}).get("board") or profile.device.get("name"))
    out.mkdir(parents=True, exist_ok=True)
    write_cells(cells, board, sim, profile.model, out / "profile-errors.csv")
    traced = write_trace(profile, sim, out / "trace.csv")
    plot(cells, f"{profile.model} on {board} vs sim:{sim}", out / "profile-vs-sim.png")
    s = summary(cells)
    print(f"{profile.model} on {board}, {s['cells']} cells, against sim:{sim}:")
    print(f"  median abs error: time {100 * s['median_abs_time_error']:.1f}%, "
          f"power {100 * s['median_abs_power_error']:.1f}%")  # fmt: skip
    print(f"  time error drift, lowest to highest clock {100 * s['time_error_drift_over_f']:+.1f}"
          f" points, batch size {100 * s['time_error_drift_over_b']:+.1f} points")  # fmt: skip
    print(f"  wrote {out / 'profile-errors.csv'}, {out / 'profile-vs-sim.png'}"
          + (f", {out / 'trace.csv'}" if traced else " (no trace: not a full sweep)"))  # fmt: skip
    return s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile", type=Path, help="profile.json written by `undercap profile`")
    p.add_argument("-o", "--output", type=Path, required=True, help="folder for the results")
    p.add_argument("--sim", help="simulated board to compare with (default: from the profile)")
    args = p.parse_args(argv)
    try:
        run(args.profile, args.output, args.sim)
    except (ValueError, UndercapError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
