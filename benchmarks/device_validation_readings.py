"""Measured rail readings under loads other than training, against the simulator's
power constants.

No measured training power was found for any simulated board (data/measured/README.md),
so the power model cannot be checked where it is used. What public tegrastats logs do
give is the board's rails under other GPU loads at a known clock: DNN inference, a CUDA
stress test, idle. Each reading (data/measured/jetson-power-readings.csv) is set beside
the part of the simulated board's power it bounds:

* GPU rail, GPU busy: the GPU's power at full activity at that clock, leakage(V) +
  C_eff V^2 f (model.py), a ceiling: a busy GPU may draw less (low activity, memory-
  bound kernels), never more;
* CPU rail: `host_active_w` per busy core (one core at least: what the simulator
  charges for driving training);
* board input, idle: `idle_board_w`;
* board input (or the Xavier NX's shared CPU+GPU rail) under load: the sum of the
  parts above plus the DRAM's active power, again a ceiling.

A ratio measured / simulated above 1 on a ceiling, or far from 1 on idle and CPU,
says a constant is off; a ratio below 1 on a ceiling says only that the load did not
use the whole GPU. None of it is training.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import harness as H

from undercap.devices.simulated.model import SimSpec, gpu_power_parts_w

RAIL_KINDS = ("gpu", "cpu", "board", "cpu+gpu")
CHECK_COLUMNS = [
    "board", "sim_device", "load", "freq_mhz", "rail", "rail_kind", "measured_power_w",
    "sim_power_w", "sim_quantity", "measured_over_sim", "source",
]  # fmt: skip


@dataclass(frozen=True)
class Reading:
    """One rail reading from a public tegrastats log."""

    board: str
    sim_device: str
    load: str
    freq_mhz: float
    gpu_busy_pct: float
    cpu_cores_busy: int
    rail: str
    rail_kind: str
    power_w: float
    source: str


@dataclass(frozen=True)
class ReadingCheck:
    reading: Reading
    sim_power_w: float
    sim_quantity: str  # what of the simulator's power the reading is set beside

    @property
    def ratio(self) -> float:
        return self.reading.power_w / self.sim_power_w


def read_readings(path: Path) -> list[Reading]:
    rows = []
    with open(path, newline="") as f:
        for line, raw in enumerate(csv.DictReader(f), start=2):
            if raw["rail_kind"] not in RAIL_KINDS:
                raise ValueError(f"line {line}: rail_kind must be one of {RAIL_KINDS}")
            power = float(raw["power_w"])
            if not power > 0:
                raise ValueError(f"line {line}: power_w must be positive, got {raw['power_w']!r}")
            rows.append(
                Reading(raw["board"], raw["sim_device"], raw["load"], float(raw["freq_mhz"]),
                        float(raw["gpu_busy_pct"]), int(raw["cpu_cores_busy"]), raw["rail"],
                        raw["rail_kind"], power, raw["source"])
            )  # fmt: skip
    return rows


def gpu_ceiling_w(spec: SimSpec, freq_mhz: float) -> float:
    """The simulated GPU's power at full activity at `freq_mhz`: leakage + dynamic."""
    leakage, dynamic = gpu_power_parts_w(spec, freq_mhz)
    return leakage + dynamic


def counterpart(spec: SimSpec, r: Reading) -> tuple[float, str]:
    """The part of the simulated board's power that reading `r` is compared with."""
    cores = max(1, r.cpu_cores_busy)
    host = cores * spec.host_active_w
    gpu = gpu_ceiling_w(spec, r.freq_mhz)
    if r.rail_kind == "gpu":
        return gpu, f"GPU at full activity at {r.freq_mhz:g} MHz (ceiling)"
    if r.rail_kind == "cpu":
        return host, f"host_active_w x {cores} busy core(s)"
    if r.rail_kind == "cpu+gpu":
        return host + gpu, f"{cores} busy core(s) + GPU at full activity (ceiling)"
    if r.gpu_busy_pct == 0:
        return spec.idle_board_w, "idle_board_w"
    total = spec.idle_board_w + host + gpu + spec.dram_active_w
    return total, f"idle + {cores} busy core(s) + GPU at full activity + DRAM (ceiling)"


def check(readings: Sequence[Reading], specs: dict[str, SimSpec]) -> list[ReadingCheck]:
    return [ReadingCheck(r, *counterpart(specs[r.sim_device], r)) for r in readings]


def write_checks(checks: Sequence[ReadingCheck], path: Path) -> None:
    rows = [{
        "board": c.reading.board, "sim_device": f"sim:{c.reading.sim_device}",
        "load": c.reading.load, "freq_mhz": c.reading.freq_mhz, "rail": c.reading.rail,
        "rail_kind": c.reading.rail_kind, "measured_power_w": c.reading.power_w,
        "sim_power_w": f"{c.sim_power_w:.4g}", "sim_quantity": c.sim_quantity,
        "measured_over_sim": f"{c.ratio:.3f}", "source": c.reading.source,
    } for c in checks]  # fmt: skip
    H.write_csv(path, rows, CHECK_COLUMNS)


def checks_markdown(checks: Sequence[ReadingCheck]) -> str:
    head = ["board", "load", "f (MHz)", "rail", "measured (W)", "simulator", "sim (W)",
            "measured / sim"]  # fmt: skip
    rows = [[c.reading.board, c.reading.load, c.reading.freq_mhz, c.reading.rail,
             c.reading.power_w, c.sim_quantity, c.sim_power_w, c.ratio] for c in checks]  # fmt: skip
    lines = [
        "## Rail readings under other loads (not training)",
        "",
        "Public tegrastats readings beside the part of the simulated board's power they",
        "bound (`benchmarks/device_validation_readings.py` says how); a ceiling's ratio may",
        "be below 1, never above.",
        "",
        H.md_table(head, rows, fmt=[None, None, "{:g}", None, "{:.2f}", None, "{:.2f}", "{:.2f}"]),
    ]
    return "\n".join(lines) + "\n"
