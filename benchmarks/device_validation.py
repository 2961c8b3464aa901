"""Benchmark: the simulated Jetsons checked against measured training on real boards.

For every measured point in benchmarks/data/measured/jetson-training.csv (board, model,
batch size, GPU clock, time per sample, and power where the source gives it; each row
cites its source), the simulated device of the same board predicts t and P for the
same model, batch size and clock, from the model's counted FLOPs and bytes
(benchmarks/device_validation_models.py builds the measured networks; the
simulator's physics is src/undercap/devices/simulated/model.py).

Rows are split before looking at any error: "fit" rows may set constants, "held-out"
rows never do. The one constant set here is the share of FP32 peak that cuDNN reaches
(`compute_efficiency`): the value that makes the simulated Nano reproduce its fit
row is printed, and the simulated Xavier NX carries it (its spec file says so; the
Nano's own spec keeps its datasheet-era 0.65, see the docs page for why). Errors are
sim / measured - 1, for the specs as shipped.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/device_validation.py
Writes benchmarks/results/device-validation/{errors.csv, table.md, validation.png} and
copies the figure to docs/figures/device-validation.png. About 15 s on 2 cores.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import shutil
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import device_validation_readings as readings
import harness as H
from profile_vs_sim import SPEC_DIR

from undercap.artifacts.workload import Workload
from undercap.devices.simulated.model import SimSpec, load_spec, step_model

MEASURED = H.BENCHMARKS / "data" / "measured"
DATA = MEASURED / "jetson-training.csv"
READINGS = MEASURED / "jetson-power-readings.csv"
# profile.json files measured on boards (`undercap profile --device jetson`): every
# cell is a held-out row (benchmarks/profile_vs_sim.py compares one by itself)
PROFILES = MEASURED / "profiles"
OUT = H.RESULTS / "device-validation"
DOCS_FIGURE = H.REPO / "docs" / "figures" / "device-validation.png"
SPLITS = ("fit", "held-out")
ERROR_COLUMNS = [
    "device", "board", "model", "batch_size", "freq_mhz", "measured_time_s", "sim_time_s",
    "time_error", "measured_power_w", "sim_power_w", "power_error", "power_rail",
    "time_kind", "split", "source",
]  # fmt: skip


@dataclass(frozen=True)
class MeasuredRow:
    """One measured configuration (times per training sample, power in W)."""

    board: str
    sim_device: str
    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    batch_size: int
    freq_mhz: float
    time_per_sample_s: float
    time_kind: str  # "step": from per-step timings; "epoch": from an epoch's duration
    power_w: float | None
    power_rail: str
    split: str
    source: str


@dataclass(frozen=True)
class Comparison:
    row: MeasuredRow
    sim_time_s: float
    sim_power_w: float

    @property
    def time_error(self) -> float:
        return self.sim_time_s / self.row.time_per_sample_s - 1.0

    @property
    def power_error(self) -> float | None:
        if self.row.power_w is None:
            return None
        return self.sim_power_w / self.row.power_w - 1.0


# --- reading ----------------------------------------------------------------------
def _positive(value: str, column: str, line: int) -> float:
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"line {line}: {column} must be a positive number, got {value!r}")
    return x


def parse_row(raw: dict[str, str], line: int) -> MeasuredRow:
    """One CSV row as a MeasuredRow; a bad value raises ValueError naming line and column."""
    if raw["split"] not in SPLITS:
        raise ValueError(f"line {line}: split must be one of {SPLITS}, got {raw['split']!r}")
    power = raw.get("power_w", "").strip()
    return MeasuredRow(
        board=raw["board"],
        sim_device=raw["sim_device"],
        model=raw["model"],
        input_shape=tuple(int(s) for s in raw["input_shape"].split("x")),
        num_classes=int(_positive(raw["num_classes"], "num_classes", line)),
        batch_size=int(_positive(raw["batch_size"], "batch_size", line)),
        freq_mhz=_positive(raw["freq_mhz"], "freq_mhz", line),
        time_per_sample_s=_positive(raw["time_per_sample_s"], "time_per_sample_s", line),
        time_kind=raw["time_kind"],
        power_w=_positive(power, "power_w", line) if power else None,
        power_rail=raw.get("power_rail", ""),
        split=raw["split"],
        source=raw["source"],
    )


def read_measured(path: Path = DATA) -> list[MeasuredRow]:
    with open(path, newline="") as f:
        return [parse_row(raw, i) for i, raw in enumerate(csv.DictReader(f), start=2)]


def profile_comparisons(folder: Path = PROFILES) -> list[Comparison]:
    """Every cell of every measured profile in `folder`, as held-out comparisons."""
    from profile_vs_sim import compare_profile, sim_board_of

    from undercap.artifacts.profile import load_profile

    out: list[Comparison] = []
    for path in sorted(folder.glob("*.json")):
        profile = load_profile(path)
        sim = sim_board_of(profile)
        details = profile.device.get("details") or {}
        rail = (profile.device.get("power_sensors") or ["board input"])[0]
        for cell in compare_profile(profile, load_spec(SPEC_DIR / f"{sim}.toml")):
            row = MeasuredRow(
                board=sim, sim_device=sim, model=profile.model, input_shape=profile.input_shape,
                num_classes=0, batch_size=cell.batch_size, freq_mhz=cell.freq_mhz,
                time_per_sample_s=cell.measured_time_s, time_kind="profile",
                power_w=cell.measured_power_w, power_rail=rail,
                split="held-out", source=f"profiles/{path.name} ({details.get('board', '?')})",
            )  # fmt: skip
            out.append(Comparison(row, cell.sim_time_s, cell.sim_power_w))
    return out


def workloads_of(rows: Iterable[MeasuredRow]) -> dict[tuple, Workload]:
    """Counted cost per sample of each (model, input shape, classes) the rows train."""
    from device_validation_models import build

    from undercap.models import workload_of

    out: dict[tuple, Workload] = {}
    for r in rows:
        key = (r.model, r.input_shape, r.num_classes)
        if key not in out:
            out[key] = workload_of(build(r.model, r.num_classes), r.model, r.input_shape)
    return out


# --- comparing and fitting --------------------------------------------------------
def compare(row: MeasuredRow, spec: SimSpec, workload: Workload) -> Comparison:
    m = step_model(spec, workload, row.batch_size, row.freq_mhz)
    return Comparison(row, m.time_per_sample_s, m.power_w)


def fit_compute_efficiency(
    pairs: Sequence[tuple[MeasuredRow, SimSpec, Workload]], lo: float = 0.05, hi: float = 1.0
) -> float:
    """The compute_efficiency at which the median log time ratio sim/measured over the
    pairs is zero (bisection: modelled time falls as efficiency rises)."""

    def median_log_ratio(eff: float) -> float:
        return statistics.median(
            math.log(compare(r, dataclasses.replace(s, compute_efficiency=eff), w).time_error + 1)
            for r, s, w in pairs
        )

    if median_log_ratio(hi) > 0 or median_log_ratio(lo) < 0:
        raise ValueError(f"no compute_efficiency in [{lo}, {hi}] reproduces the fit rows")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if median_log_ratio(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


def summarise(comparisons: Sequence[Comparison], by: str = "board") -> list[dict[str, object]]:
    """Per (board, split) (or per (model, split) with by="model"), and for all held-out
    rows: the number of rows and the median absolute time and power errors (None where
    no row has that measurement)."""
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault((getattr(c.row, by), c.row.split), []).append(c)
    held = [c for c in comparisons if c.row.split == "held-out"]
    groups[(f"all {by}s", "held-out")] = held
    return [_summary(name, split, cs) for (name, split), cs in groups.items()]


def _summary(group: str, split: str, cs: Sequence[Comparison]) -> dict[str, object]:
    times = [abs(c.time_error) for c in cs]
    powers = [abs(c.power_error) for c in cs if c.power_error is not None]
    return {
        "group": group,
        "split": split,
        "rows": len(cs),
        "median_abs_time_error": statistics.median(times) if times else None,
        "power_rows": len(powers),
        "median_abs_power_error": statistics.median(powers) if powers else None,
    }


# --- writing ----------------------------------------------------------------------
def _fmt(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def error_record(c: Comparison) -> dict[str, object]:
    r = c.row
    return {
        "device": f"sim:{r.sim_device}", "board": r.board, "model": r.model,
        "batch_size": r.batch_size, "freq_mhz": r.freq_mhz,
        "measured_time_s": r.time_per_sample_s, "sim_time_s": _fmt(c.sim_time_s),
        "time_error": _fmt(c.time_error, 3), "measured_power_w": _fmt(r.power_w),
        "sim_power_w": _fmt(c.sim_power_w), "power_error": _fmt(c.power_error, 3),
        "power_rail": r.power_rail, "time_kind": r.time_kind, "split": r.split,
        "source": r.source,
    }  # fmt: skip


def write_errors(comparisons: Sequence[Comparison], path: Path) -> None:
    H.write_csv(path, [error_record(c) for c in comparisons], ERROR_COLUMNS)


def _pct(x: float | None) -> str:
    return "no measurement" if x is None else f"{100 * x:+.0f}%"


def table_markdown(comparisons: Sequence[Comparison], fitted: float) -> str:
    head = ["board", "model", "b", "f (MHz)", "measured t", "sim t", "t error", "measured P",
            "sim P", "P error", "split", "kind"]  # fmt: skip
    rows = [[c.row.board, c.row.model, c.row.batch_size, c.row.freq_mhz, c.row.time_per_sample_s,
             c.sim_time_s, _pct(c.time_error), _fmt(c.row.power_w, 3) or "-", c.sim_power_w,
             _pct(c.power_error), c.row.split, c.row.time_kind] for c in comparisons]  # fmt: skip
    lines = [
        "# Simulated devices against measured Jetson training",
        "",
        "`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/device_validation.py` (data and",
        "sources: `benchmarks/data/measured/`). Times are seconds per training sample; errors",
        "are sim / measured - 1 for the specs as shipped.",
        "",
        H.md_table(head, rows, fmt=[None] * 3 + ["{:g}", "{:.4f}", "{:.4f}", None, None, "{:.2f}"]),
    ]
    for by in ("board", "model"):
        head = [by, "split", "rows", "median abs t error", "rows with P", "median abs P error"]
        groups = [[s["group"], s["split"], s["rows"], _pct(s["median_abs_time_error"]).lstrip("+"),
                   s["power_rows"], _pct(s["median_abs_power_error"]).lstrip("+")]
                  for s in summarise(comparisons, by)]  # fmt: skip
        lines += ["", H.md_table(head, groups)]
    lines += ["", f"Fitted compute_efficiency (fit rows only): {fitted:.3f}.", ""]
    return "\n".join(lines)


def plot(comparisons: Sequence[Comparison], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.add_subplot(1, 1, 1)
    boards = sorted({c.row.board for c in comparisons})
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")
    colours = {board: palette[i % len(palette)] for i, board in enumerate(boards)}
    values = [v * 1e3 for c in comparisons for v in (c.row.time_per_sample_s, c.sim_time_s)]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=1)
    ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="0.9")
    models = sorted({c.row.model for c in comparisons})
    markers = {m: "osD^v<>"[i % 7] for i, m in enumerate(models)}
    for c in comparisons:
        filled = c.row.split == "fit"
        marker = markers[c.row.model]
        ax.scatter(
            c.row.time_per_sample_s * 1e3, c.sim_time_s * 1e3, s=60, marker=marker, zorder=3,
            facecolors=colours[c.row.board] if filled else "none", edgecolors=colours[c.row.board],
        )  # fmt: skip
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    ax.set_xlabel("measured time per sample (ms)")
    ax.set_ylabel("simulated time per sample (ms)")
    ax.set_title("Simulated vs measured Jetson training (band: +-15%)", fontsize=10)
    for board in boards:
        ax.scatter([], [], color=colours[board], label=board)
    for model in models:
        ax.scatter([], [], marker=markers[model], facecolors="none", edgecolors="k", label=model)
    ax.legend(fontsize=8, loc="upper left", title="filled: fit, open: held-out", title_fontsize=8)
    if not any(c.row.power_w for c in comparisons):
        ax.text(0.98, 0.02, "no measured training power found: time only",
                transform=ax.transAxes, ha="right", fontsize=8)  # fmt: skip
    fig.savefig(path, dpi=120, bbox_inches="tight")


def spec_table(specs: dict[str, SimSpec], rows: Sequence[MeasuredRow]) -> str:
    """The main constants of every bundled simulated device, and how many measured
    rows check each (docs/concepts/simulated.md shows this table)."""
    head = ["device", "CUDA cores", "GPU clocks (MHz)", "peak FP32 (GFLOPS)", "compute_efficiency",
            "DRAM (GB/s)", "usable memory (GB)", "idle (W)", "C_eff (nF)", "V at fmax",
            "measured rows"]  # fmt: skip
    table = [[f"sim:{name}", s.cores, f"{s.freqs_mhz[0]:g}-{s.fmax_mhz:g} ({len(s.freqs_mhz)} steps)",
              s.cores * 2 * s.fmax_mhz / 1e3, s.compute_efficiency, s.bandwidth_bytes_per_s / 1e9,
              s.memory_usable_bytes / 1e9, s.idle_board_w, s.c_eff_f * 1e9, s.voltage_v[-1],
              sum(r.sim_device == name for r in rows)]
             for name, s in sorted(specs.items())]  # fmt: skip
    return H.md_table(head, table, fmt=[None, None, None, "{:.0f}"] + ["{:g}"] * 6) + "\n"


# --- main ----------------------------------------------------------------------------
def main() -> int:
    rows = read_measured()
    workloads = workloads_of(rows)
    specs = {name: load_spec(SPEC_DIR / f"{name}.toml") for name in {r.sim_device for r in rows}}
    triples = [
        (r, specs[r.sim_device], workloads[(r.model, r.input_shape, r.num_classes)]) for r in rows
    ]
    comparisons = [compare(r, s, w) for r, s, w in triples] + profile_comparisons()
    fitted = fit_compute_efficiency([t for t in triples if t[0].split == "fit"])
    OUT.mkdir(parents=True, exist_ok=True)
    write_errors(comparisons, OUT / "errors.csv")
    refit = [
        compare(r, dataclasses.replace(s, compute_efficiency=fitted), w) for r, s, w in triples
    ]
    held = [abs(c.time_error) for c in refit if c.row.split == "held-out"]
    what_if = (
        f"With the fitted value in every spec (the Nano's too), the held-out median abs t "
        f"error of the published rows would be {100 * statistics.median(held):.0f}% "
        "(specs as shipped: see above).\n"
    )
    bundled = {p.stem: load_spec(p) for p in sorted(SPEC_DIR.glob("*.toml"))}
    checks = readings.check(readings.read_readings(READINGS), bundled)
    readings.write_checks(checks, OUT / "readings.csv")
    constants = "## Constants of the simulated devices\n\n" + spec_table(bundled, rows)
    report = "\n".join(
        [table_markdown(comparisons, fitted) + what_if, readings.checks_markdown(checks), constants]
    )
    H.write_text(OUT / "table.md", report)
    plot(comparisons, OUT / "validation.png")
    shutil.copyfile(OUT / "validation.png", DOCS_FIGURE)
    print(report)
    in_specs = ", ".join(f"{n}: {s.compute_efficiency:g}" for n, s in sorted(specs.items()))
    print(f"fitted compute_efficiency = {fitted:.3f} (specs: {in_specs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
