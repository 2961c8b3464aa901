"""trace:<file.csv>: measured (b, f) configurations replayed as a device, end to end
through profile and Algorithm 1, on a small synthetic trace."""

from pathlib import Path

import numpy as np
import pytest

from undercap.artifacts.workload import Workload
from undercap.devices import open_device
from undercap.devices.factory import state_files
from undercap.devices.trace import NotMeasuredError, read_trace
from undercap.errors import DeviceError
from undercap.profile import ProfileSettings, run_profile
from undercap.select import select_ours

FAST = ProfileSettings(warmup_steps=1, measure_steps=2, sample_rate_hz=200.0)
HEADER = "board,model,batch_size,freq_mhz,time_per_sample_s,power_w\n"
# A made-up board where the small batch is cheaper in power but slower per sample, and
# the large batch exceeds 5 W at the top clock: Algorithm 1's trade-off in six numbers.
GRID = {
    (8, 460.8): (0.020, 3.0),
    (8, 921.6): (0.012, 4.2),
    (32, 460.8): (0.012, 3.6),
    (32, 921.6): (0.007, 5.6),
}
SMALL = Workload("small-cnn", (3, 32, 32), 2.7e6, 36e3, 230e3, 56_554, 68)


def _write(path: Path, grid=GRID, board: str = "jetson-nano", model: str = "small-cnn") -> Path:
    rows = [f"{board},{model},{b},{f},{t},{p}\n" for (b, f), (t, p) in grid.items()]
    path.write_text(HEADER + "".join(rows))
    return path


def test_replays_the_measured_points_on_the_virtual_clock(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv")
    dev = open_device(f"trace:{path}", seed=1)
    assert dev.available_freqs_mhz() == (460.8, 921.6) and dev.name == f"trace:{path}"
    info = dev.info()
    assert info.backend == "trace" and info.is_simulated and "REPLAYED" in info.details["note"]
    step = dev.model_step(SMALL, 32, 460.8)
    assert (step.time_per_sample_s, step.power_w, step.step_time_s) == (0.012, 3.6, 0.012 * 32)
    dev.set_freq_mhz(921.6)
    for _ in range(200):
        dev.account_step(SMALL, 8)
    assert dev.now_s() == pytest.approx(200 * 8 * 0.012)
    readings = dev.power_readings_w(np.linspace(0.01, dev.now_s(), 2000))
    assert readings.mean() == pytest.approx(4.2, rel=0.02)
    assert state_files(f"trace:{path}") == []


def test_unmeasured_configurations_are_refused_with_one_line(tmp_path: Path) -> None:
    dev = open_device(f"trace:{_write(tmp_path / 't.csv')}")
    with pytest.raises(NotMeasuredError, match="not measured at batch size 16.*8, 32"):
        dev.check_fits(SMALL, 16)
    dev.check_fits(SMALL, 32)
    other = Workload("resnet18", (3, 32, 32), 3.3e9, 4.7e6, 43e6, 11_173_962, 297)
    with pytest.raises(DeviceError, match="no batch size of it") as e:
        dev.model_step(other, 8, 921.6)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("board,model,batch_size\n", "missing column"),
        (HEADER + "jetson-nano,m,8,921.6,-1,4\n", "line 2: time_per_sample_s"),
        (HEADER + "jetson-nano,m,8.5,921.6,0.1,4\n", "whole number"),
        (HEADER + "jetson-nano,m,8,921.6,0.1,4\njetson-tx2nx,m,8,921.6,0.1,4\n", "one board"),
        (HEADER + "jetson-nano,m,8,921.6,0.1,4\njetson-nano,m,8,921.6,0.2,4\n", "twice"),
        (HEADER + "jetson-nano,m,8,921.6,0.1,4\njetson-nano,m,16,460.8,0.1,4\n", "lacks"),
    ],
)
def test_bad_files_fail_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(DeviceError, match=message) as e:
        read_trace(path)
    assert "\n" not in str(e.value)


def test_unknown_board_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="unknown board 'jetson-agx'.*jetson-nano"):
        open_device(f"trace:{_write(tmp_path / 't.csv', board='jetson-agx')}")
    with pytest.raises(DeviceError, match="trace .* does not exist"):
        open_device(f"trace:{tmp_path / 'absent.csv'}")


def test_profile_then_algorithm1_on_measured_numbers(tmp_path: Path) -> None:
    dev = open_device(f"trace:{_write(tmp_path / 't.csv')}", seed=0)
    before = dev.save_state()
    prof = run_profile(dev, "small-cnn", (3, 32, 32), [8, 32], settings=FAST, progress=False)
    assert dev.save_state() == before
    assert {(r.batch_size, r.freq_mhz) for r in prof.rows} == set(GRID)
    for r in prof.rows:
        t, p = GRID[(r.batch_size, r.freq_mhz)]
        assert r.time_per_sample_s == pytest.approx(t, rel=1e-9)
        assert r.mean_power_w == pytest.approx(p, rel=0.05)
    # Under 5 W the large batch must drop to 460.8 MHz (t 0.012) while the small one
    # keeps 921.6 MHz (t 0.012 too); with r(8) = 0.5 the small batch wins.
    choice = select_ours(prof, {8: 0.5, 32: 1.0}, 5.0, margin_w=0.0)
    assert (choice.batch_size, choice.freq_mhz) == (8, 921.6)
    choice = select_ours(prof, {8: 1.5, 32: 1.0}, 5.0, margin_w=0.0)
    assert (choice.batch_size, choice.freq_mhz) == (32, 460.8)
