"""benchmarks/device_validation.py: the measured-data file, the error arithmetic, the
fit that sets the simulated Xavier NX's compute_efficiency, and the split's integrity."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from undercap.artifacts.workload import Workload
from undercap.devices.simulated.model import load_spec, step_model

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import device_validation as dv  # noqa: E402
import device_validation_readings as readings  # noqa: E402

NANO = load_spec(dv.SPEC_DIR / "jetson-nano.toml")
WL = Workload("net", (3, 32, 32), 3.3e9, 4.7e6, 43e6, 11_000_000, 300)


def _row(**kw) -> dv.MeasuredRow:
    base = dict(
        board="jetson-nano", sim_device="jetson-nano", model="net", input_shape=(3, 32, 32),
        num_classes=10, batch_size=8, freq_mhz=921.6, time_per_sample_s=0.01,
        time_kind="step", power_w=None, power_rail="", split="fit", source="test",
    )  # fmt: skip
    base.update(kw)
    return dv.MeasuredRow(**base)


def test_measured_file_parses_and_every_row_cites_a_source() -> None:
    rows = dv.read_measured()
    assert rows and all(r.source and r.split in dv.SPLITS for r in rows)
    held = {r.board for r in rows if r.split == "held-out"}
    assert len(held) >= 2  # held-out rows from at least two boards (issue 26)
    assert all((dv.SPEC_DIR / f"{r.sim_device}.toml").is_file() for r in rows)


def test_bad_rows_are_named_by_line_and_column() -> None:
    good = {
        "board": "b", "sim_device": "jetson-nano", "model": "m", "input_shape": "3x8x8",
        "num_classes": "2", "batch_size": "4", "freq_mhz": "921.6",
        "time_per_sample_s": "0.1", "time_kind": "step", "power_w": "", "split": "fit",
        "source": "s",
    }  # fmt: skip
    assert dv.parse_row(good, 2).power_w is None
    with pytest.raises(ValueError, match="line 7: time_per_sample_s"):
        dv.parse_row({**good, "time_per_sample_s": "-1"}, 7)
    with pytest.raises(ValueError, match="line 3: split"):
        dv.parse_row({**good, "split": "train"}, 3)
    with pytest.raises(ValueError, match="power_w"):
        dv.parse_row({**good, "power_w": "nan"}, 4)


def test_errors_are_sim_over_measured_minus_one() -> None:
    model = step_model(NANO, WL, 8, 921.6)
    row = _row(time_per_sample_s=model.time_per_sample_s * 2, power_w=model.power_w / 1.25)
    c = dv.compare(row, NANO, WL)
    assert c.time_error == pytest.approx(-0.5)
    assert c.power_error == pytest.approx(0.25)
    assert dv.compare(_row(), NANO, WL).power_error is None


def test_fit_recovers_a_known_efficiency() -> None:
    truth = dataclasses.replace(NANO, compute_efficiency=0.42)
    rows = [_row(batch_size=b) for b in (4, 16, 64)]
    rows = [
        dataclasses.replace(r, time_per_sample_s=dv.compare(r, truth, WL).sim_time_s) for r in rows
    ]
    fitted = dv.fit_compute_efficiency([(r, NANO, WL) for r in rows])
    assert fitted == pytest.approx(0.42, rel=1e-6)
    with pytest.raises(ValueError, match="no compute_efficiency"):
        dv.fit_compute_efficiency([(_row(time_per_sample_s=1e-9), NANO, WL)])


def test_summary_medians_by_board_and_split() -> None:
    def comp(board: str, split: str, err: float) -> dv.Comparison:
        return dv.Comparison(_row(board=board, split=split), 0.01 * (1 + err), 5.0)

    cs = [comp("a", "held-out", 0.1), comp("a", "held-out", -0.3), comp("b", "held-out", 0.2)]
    cs.append(comp("a", "fit", 0.05))
    by = {(s["group"], s["split"]): s for s in dv.summarise(cs)}
    assert by[("a", "held-out")]["median_abs_time_error"] == pytest.approx(0.2)
    assert by[("all boards", "held-out")]["rows"] == 3
    assert by[("all boards", "held-out")]["median_abs_time_error"] == pytest.approx(0.2)
    assert by[("a", "fit")]["median_abs_power_error"] is None


def test_xavier_nx_efficiency_is_the_fit_of_the_fit_rows() -> None:
    """The new device's one fitted constant must be what its data says, computed from
    the fit rows alone."""
    rows = dv.read_measured()
    fit_rows = [r for r in rows if r.split == "fit"]
    workloads = dv.workloads_of(fit_rows)
    triples = [
        (
            r,
            load_spec(dv.SPEC_DIR / f"{r.sim_device}.toml"),
            workloads[(r.model, r.input_shape, r.num_classes)],
        )
        for r in fit_rows
    ]
    fitted = dv.fit_compute_efficiency(triples)
    nx = load_spec(dv.SPEC_DIR / "jetson-xavier-nx.toml")
    # within the spec's two decimals (torch 2.0's FLOP-count fallback may differ slightly)
    assert nx.compute_efficiency == pytest.approx(fitted, abs=0.01)


# --- rail readings under other loads (device_validation_readings.py) -----------------


def test_gpu_ceiling_is_the_models_gpu_power_at_full_activity() -> None:
    # No per-step overheads, a GPU saturated at any batch and no DRAM traffic: the
    # model's activity tends to 1, so board power - idle - host - DRAM background is
    # the GPU's leakage + dynamic power at full activity.
    spec = dataclasses.replace(
        NANO, kernel_launch_s=0.0, host_overhead_s=0.0, half_saturation_elements_per_core=1e-9
    )
    wl = Workload("net", (3, 32, 32), 3.3e9, 4.7e6, 1.0, 10, 300)
    for f in (307.2, 614.4, 921.6):
        m = step_model(spec, wl, 256, f)
        gpu = m.power_w - spec.idle_board_w - spec.host_active_w - spec.dram_active_w
        assert gpu == pytest.approx(readings.gpu_ceiling_w(spec, f), rel=1e-4)
    assert readings.gpu_ceiling_w(NANO, 921.6) > readings.gpu_ceiling_w(NANO, 460.8)


def test_no_measured_reading_exceeds_a_simulated_ceiling() -> None:
    rows = readings.read_readings(dv.READINGS)
    specs = {r.sim_device: load_spec(dv.SPEC_DIR / f"{r.sim_device}.toml") for r in rows}
    checks = readings.check(rows, specs)
    assert {r.rail_kind for r in rows} == set(readings.RAIL_KINDS)
    ceilings = [c for c in checks if "ceiling" in c.sim_quantity]
    assert ceilings and all(c.ratio <= 1.0 for c in ceilings)
    idle = [c for c in checks if c.sim_quantity == "idle_board_w"]
    assert idle and all(0.5 < c.ratio < 2.0 for c in idle)


def test_bad_reading_rows_are_named_by_line(tmp_path: Path) -> None:
    text = dv.READINGS.read_text().splitlines()
    bad = tmp_path / "r.csv"
    bad.write_text("\n".join([text[0], text[1].replace(",gpu,", ",gpu-rail,")]) + "\n")
    with pytest.raises(ValueError, match="line 2: rail_kind"):
        readings.read_readings(bad)
