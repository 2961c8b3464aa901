"""benchmarks/profile_vs_sim.py: a profile measured on a board, cell by cell against
the simulator; its trace output and the measured-profiles folder of device_validation."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from undercap.artifacts.profile import save_profile
from undercap.devices import open_device
from undercap.devices.simulated.model import load_spec, step_model
from undercap.profile import ProfileSettings, run_profile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import device_validation as dv  # noqa: E402
import profile_vs_sim as pvs  # noqa: E402

FAST = ProfileSettings(warmup_steps=1, measure_steps=2, sample_rate_hz=200.0)


@pytest.fixture(scope="module")
def nano_profile(tmp_path_factory: pytest.TempPathFactory):
    """A real profile run on the simulated Nano: 2 batch sizes x 2 clocks."""
    dev = open_device("sim:jetson-nano", seed=0)
    prof = run_profile(
        dev, "small-cnn", (3, 32, 32), [8, 32], freqs_mhz=[460.8, 921.6], settings=FAST,
        progress=False,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("prof") / "nano.json"
    save_profile(path, prof)
    return prof, path


def test_the_board_it_was_measured_on_predicts_it(nano_profile) -> None:
    prof, _ = nano_profile
    cells = pvs.compare_profile(prof, load_spec(pvs.SPEC_DIR / "jetson-nano.toml"))
    assert len(cells) == 4
    for c in cells:
        assert c.time_error == pytest.approx(0.0, abs=1e-9)
        assert abs(c.power_error) < 0.02  # the profile's means carry sensor noise
    s = pvs.summary(cells)
    assert s["median_abs_time_error"] < 1e-9 and s["time_error_drift_over_f"] == pytest.approx(0)


def test_a_slower_model_shows_as_positive_time_error_growing_with_clock(nano_profile) -> None:
    prof, _ = nano_profile
    spec = load_spec(pvs.SPEC_DIR / "jetson-nano.toml")
    slow = dataclasses.replace(spec, compute_efficiency=spec.compute_efficiency / 2)
    cells = pvs.compare_profile(prof, slow)
    assert all(c.time_error > 0 for c in cells)
    # compute time doubles, the fixed per-step costs do not: the error is largest where
    # compute dominates, at the large batch and the low clock
    by = {(c.batch_size, c.freq_mhz): c.time_error for c in cells}
    assert by[(32, 460.8)] > by[(32, 921.6)] and by[(32, 460.8)] > by[(8, 460.8)]
    assert pvs.summary(cells)["time_error_drift_over_f"] < 0


@pytest.mark.parametrize(
    "board, sim",
    [
        ("NVIDIA Jetson Nano Developer Kit", "jetson-nano"),
        ("NVIDIA Jetson Orin Nano Developer Kit", "jetson-orin-nano"),
        ("NVIDIA Jetson Xavier NX Developer Kit", "jetson-xavier-nx"),
        ("NVIDIA Jetson TX2 NX", "jetson-tx2nx"),
    ],
)
def test_board_is_read_from_the_device_tree_model(nano_profile, board: str, sim: str) -> None:
    prof, _ = nano_profile
    real = dataclasses.replace(prof, device={"name": "jetson", "details": {"board": board}})
    assert pvs.sim_board_of(real) == sim


def test_unknown_board_asks_for_sim(nano_profile, tmp_path: Path, capsys) -> None:
    prof, _ = nano_profile
    agx = dataclasses.replace(
        prof, device={"name": "jetson", "details": {"board": "Jetson AGX Orin"}}
    )
    with pytest.raises(ValueError, match="--sim"):
        pvs.sim_board_of(agx)
    path = tmp_path / "agx.json"
    save_profile(path, agx)
    assert pvs.main([str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert pvs.main([str(path), "-o", str(tmp_path / "out"), "--sim", "jetson-agx"]) == 2
    assert "no simulated board 'jetson-agx'" in capsys.readouterr().err
    assert pvs.main([str(path), "-o", str(tmp_path / "out"), "--sim", "jetson-nano"]) == 0


def test_outputs_and_the_trace_replays_the_profile(nano_profile, tmp_path: Path) -> None:
    prof, path = nano_profile
    pvs.run(path, tmp_path)
    import pandas as pd

    errors = pd.read_csv(tmp_path / "profile-errors.csv")
    assert list(errors.columns) == pvs.CELL_COLUMNS and len(errors) == 4
    assert (tmp_path / "profile-vs-sim.png").stat().st_size > 0
    dev = open_device(f"trace:{tmp_path / 'trace.csv'}", seed=0)
    again = run_profile(dev, "small-cnn", (3, 32, 32), [8, 32], settings=FAST, progress=False)
    for r in again.rows:
        assert r.time_per_sample_s == pytest.approx(
            prof.row(r.batch_size, r.freq_mhz).time_per_sample_s, rel=1e-9
        )


def test_no_trace_from_a_partial_sweep(nano_profile, tmp_path: Path) -> None:
    prof, _ = nano_profile
    partial = dataclasses.replace(prof, rows=prof.rows[:3])
    assert not pvs.write_trace(partial, "jetson-nano", tmp_path / "t.csv")
    assert not (tmp_path / "t.csv").exists()


def test_measured_profiles_join_the_validation_as_held_out_rows(
    nano_profile, tmp_path: Path
) -> None:
    _, path = nano_profile
    (tmp_path / "nano.json").write_text(path.read_text())
    rows = dv.profile_comparisons(tmp_path)
    assert len(rows) == 4
    assert {c.row.split for c in rows} == {"held-out"} and all(c.row.power_w for c in rows)
    assert all(abs(c.time_error) < 1e-9 and abs(c.power_error) < 0.02 for c in rows)
    workload = json.loads(path.read_text())["workload"]
    assert rows[0].row.model == workload["model"]
    # and step_model is what the errors are against
    m = step_model(load_spec(pvs.SPEC_DIR / "jetson-nano.toml"),
                   dv.Workload.from_dict(workload), 8, 460.8)  # fmt: skip
    assert rows[0].sim_time_s == pytest.approx(m.time_per_sample_s)
