"""The Jetson backend against trees laid out as each real board and release shows them
(tests/fakes/boards.py cites the sources): discovery and units per board, the power
mode's floor and ceiling, JetPack 6's late GPU, Thor, and lock/restore round trips
on both devfreq generations (Linux 4.9 stored values, 5.x PM QoS requests)."""

import json
import os
import sys
from pathlib import Path
from typing import Optional

import pytest
from fakes import pynvml as fake_nvml
from fakes.kernel import FakeKernel, load_state
from fakes.sysfs import FakeTree, build_board, build_orin_nano, build_thor

from undercap.cli import main
from undercap.devices import controlled, locked
from undercap.devices.factory import replay
from undercap.devices.jetson import JetsonDevice
from undercap.devices.jetson.nvpmodel import NvpModel, mode_range
from undercap.devices.jetson.sysfs import JetsonUnavailable
from undercap.errors import DeviceError


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNDERCAP_STATE_DIR", raising=False)
    fake_nvml.reset([])
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)


def device(tree: FakeTree, kernel: Optional[FakeKernel] = None, **kw) -> JetsonDevice:
    kernel = kernel or FakeKernel(tree)
    return JetsonDevice(tree.root, writer=kernel.write, nvpmodel_runner=None, **kw)


def devices_json(capsys, root: Path) -> dict:
    assert main(["devices", "--json", "--no-nvml", "--sysfs-root", str(root)]) == 0
    (jet,) = [i for i in json.loads(capsys.readouterr().out) if i["backend"] == "jetson"]
    return jet


# --- each board as it is ---------------------------------------------------------------
# board: (devfreq node, GPU, first and last offered MHz, total rail, GPU rail, rail layout)
LAYOUTS = {
    "nano": ("57000000.gpu", "gm20b", 76.8, 921.6, "POM_5V_IN", "POM_5V_GPU", "iio"),
    "tx2": ("17000000.gp10b", "gp10b", 114.75, 1134.75, "VDD_IN", "VDD_SYS_GPU", "iio"),
    "tx2nx": ("17000000.gp10b", "gp10b", 114.75, 1300.5, "VDD_IN", "VDD_CPU_GPU (CPU+GPU)",
              "iio"),
    "tx2-r28": ("17000000.gp10b", "gp10b", 114.75, 1134.75, "VDD_IN", None, "iio"),
    "xavier-r32": ("17000000.gv11b", "gv11b", 318.75, 675.75, "sum of rails", "GPU", "iio"),
    "xavier-r35": ("17000000.gv11b", "gv11b", 318.75, 675.75, "sum of rails", "GPU", "hwmon"),
    "xavier-nx-r35": ("17000000.gv11b", "gv11b", 114.75, 1109.25, "VDD_IN",
                      "VDD_CPU_GPU_CV (CPU+GPU+CV)", "hwmon"),
    "agx-orin-r35": ("17000000.ga10b", "ga10b", 114.75, 624.75, "sum of rails",
                     "VDD_GPU_SOC (GPU+SOC)", "hwmon"),
    "orin-nano-r36": ("17000000.gpu", "ga10b", 306.0, 1020.0, "VDD_IN",
                      "VDD_CPU_GPU_CV (CPU+GPU+CV)", "hwmon"),
}  # fmt: skip


@pytest.mark.parametrize("board", sorted(LAYOUTS))
def test_devices_reads_each_board_right(tmp_path: Path, capsys, board: str) -> None:
    node, gpu, first, last, total, gpu_rail, layout = LAYOUTS[board]
    build_board(tmp_path, board)
    jet = devices_json(capsys, tmp_path)
    d = jet["details"]
    assert (d["devfreq_node"], d["gpu"]) == (node, gpu)
    assert (jet["freqs_mhz"][0], jet["freqs_mhz"][-1]) == (first, last)
    assert d["power"]["total_rail"] == total and d["power"]["layout"] == [layout]
    assert (d["power"]["gpu_rail"] or d["power"]["gpu_combined_rail"]) == gpu_rail
    assert "NC" not in jet["power_sensors"]
    dev = device(FakeTree.load(tmp_path, node))
    assert 0.5 < dev.power_w() < 30  # mW x 1e-3 (iio) or mV x mA x 1e-6 (hwmon): watts


def test_tx2_maxp_core_arm_offers_1134_75(tmp_path: Path, capsys) -> None:
    """nvpmodel configures 1120000000; the kernel runs 1134750000 (jetson_clocks)."""
    build_board(tmp_path, "tx2", nvpmodel_mode=3)
    jet = devices_json(capsys, tmp_path)
    assert 1134.75 in jet["freqs_mhz"] and jet["freqs_mhz"][-1] == 1134.75
    nvp = jet["details"]["nvpmodel"]
    assert (nvp["mode_name"], nvp["gpu_max_freq_mhz"], nvp["ceiling_mhz"]) == (
        "MAXP_CORE_ARM", 1120.0, 1134.75)  # fmt: skip
    assert nvp["ceiling_from"] == "kernel max_freq after nvpmodel"
    assert main(["devices", "--no-nvml", "--sysfs-root", str(tmp_path)]) == 0
    assert "power mode allows: 114.75 .. 1134.75 MHz" in capsys.readouterr().out


def test_mode_range_rounds_conf_onto_the_table_when_kernel_value_is_not_the_modes() -> None:
    tx2 = (114750000, 1032750000, 1134750000, 1236750000, 1300500000)
    nvp = NvpModel(3, "MAXP_CORE_ARM", 1120000000, None, "status", "/etc/nvpmodel.conf")
    assert mode_range(nvp, tx2, 1134750000).ceiling_hz == 1134750000  # kernel's
    left = mode_range(nvp, tx2, 114750000)  # a killed run's lock: not the mode's
    assert (left.ceiling_hz, left.ceiling_source) == (1134750000, "conf cap rounded to "
                                                      "the nearest step")  # fmt: skip
    xavier = (318750000, 420750000, 522750000, 624750000, 675750000, 828750000, 905250000)
    for cap, step in ((520000000, 522750000), (670000000, 675750000), (900000000, 905250000)):
        nvp = NvpModel(2, "MODE", cap, 318750000, "status", "/etc/nvpmodel.conf")
        rng = mode_range(nvp, xavier, None)
        assert (rng.floor_hz, rng.ceiling_hz) == (318750000, step)


def test_nano_5w_raw_640_mhz_offers_614_4(tmp_path: Path) -> None:
    dev = device(build_board(tmp_path, "nano", nvpmodel_mode=1))
    assert dev.read_only is False and dev.available_freqs_mhz()[-1] == 614.4


def test_xavier_mode_floor_is_reported_and_kept(tmp_path: Path, capsys) -> None:
    tree = build_board(tmp_path, "xavier-r35")
    jet = devices_json(capsys, tmp_path)
    assert jet["details"]["mode_floor_mhz"] == 318.75
    assert jet["details"]["nvpmodel"]["gpu_min_freq_mhz"] == 318.75
    assert tree.read("min_freq") == "318750000"
    assert load_state(tmp_path)["user_min_khz"] == 318750  # nvpmodel's min request


def test_hwmon_conversion_is_read_not_assumed(tmp_path: Path) -> None:
    dev = device(build_board(tmp_path, "agx-orin-r35"))
    assert dev.sensor_update_interval_s() == 0.007
    assert dev.info().details["power"]["conversion"] == {"samples": "1", "update_interval": "7"}


def test_iio_device_folder_of_early_releases(tmp_path: Path) -> None:
    tree = build_board(tmp_path, "tx2-r28")
    assert (tmp_path / "sys/bus/i2c/drivers/ina3221x/0-0041/iio_device/rail_name_0").is_file()
    tree.set_rail("VDD_IN", 19000, 500)
    assert device(tree).power_w() == pytest.approx(9.5)


# --- JetPack 6: the GPU registers with devfreq at its first power-up ---------------------
def test_late_gpu_is_woken_found_and_railgate_put_back(tmp_path: Path, capsys, monkeypatch):
    tree = build_orin_nano(tmp_path, late_gpu=True)
    assert not (tmp_path / "sys/class/devfreq/17000000.gpu").exists()
    kernel = FakeKernel(tree)
    monkeypatch.setattr("undercap.devices.jetson.device.write_attr", kernel.write)
    jet = devices_json(capsys, tmp_path)
    assert jet["freqs_mhz"][-1] == 1020.0
    assert "appeared once undercap powered the GPU up" in jet["details"]["gpu_woken"]
    assert [w[0] for w in kernel.writes] == ["railgate_enable", "railgate_enable"]
    assert tree.railgate.read_text().strip() == "1"
    assert (tmp_path / "sys/devices/platform/17000000.gpu/devfreq_dev/max_freq").is_file()


def test_late_gpu_without_permission_says_what_to_run(tmp_path: Path, capsys, monkeypatch):
    build_orin_nano(tmp_path, late_gpu=True)
    with pytest.raises(JetsonUnavailable) as e:
        JetsonDevice(tmp_path, read_only=True, nvpmodel_runner=None)
    msg = str(e.value)
    assert "\n" not in msg and "has not registered with devfreq yet" in msg
    assert 'sudo "$(command -v undercap)" devices' in msg and "read-only" in msg
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if m & os.W_OK else real(p, m))
    assert main(["devices", "--no-nvml", "--sysfs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "jetson: the GPU at" in out and "writable by root only" in out


def test_late_gpu_round_trip(tmp_path: Path) -> None:
    tree = build_orin_nano(tmp_path, late_gpu=True)
    kernel = FakeKernel(tree)
    dev = device(tree, kernel)
    before = tree.snapshot()
    with locked(dev, 714.0) as f:
        assert f == 714.0
    assert tree.snapshot() == before


# --- Thor ---------------------------------------------------------------------------------
def test_thor_is_not_supported_in_one_line(tmp_path: Path, capsys) -> None:
    build_thor(tmp_path)
    with pytest.raises(JetsonUnavailable, match="Jetson Thor .* not supported"):
        JetsonDevice(tmp_path, nvpmodel_runner=None)
    assert main(["devices", "--no-nvml", "--sysfs-root", str(tmp_path)]) == 0
    assert "jetson: Jetson Thor (JetPack 7: GPU devfreq domain gpu-gpc-0, no INA3221" in (
        capsys.readouterr().out)  # fmt: skip
    assert main(["restore", "--device", "jetson", "--sysfs-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Jetson Thor") and "\n" not in err


# --- lock/restore round trips, both kernel generations ---------------------------------------
ROUND_TRIP_BOARDS = ["nano", "tx2", "xavier-r32", "xavier-r35", "agx-orin-r35", "orin-nano-r36"]


@pytest.mark.parametrize("board", ROUND_TRIP_BOARDS)
def test_round_trip_leaves_every_file_as_it_was(tmp_path: Path, board: str) -> None:
    tree = build_board(tmp_path, board)
    kernel = FakeKernel(tree)
    dev = device(tree, kernel)
    before = tree.snapshot()
    steps = dev.available_freqs_mhz()
    for f in (steps[0], steps[-1], steps[len(steps) // 2]):
        with locked(dev, f) as got:
            assert got == f and tree.read("cur_freq") == str(int(round(f * 1e6)))
        assert tree.snapshot() == before, f
    with controlled(dev):  # nested and moving both ways
        dev.set_freq_mhz(steps[-1])
        with locked(dev, steps[0]):
            pass
        dev.set_freq_mhz(steps[len(steps) // 2])
    assert tree.snapshot() == before and kernel.rejected == []


@pytest.mark.parametrize("board", ["nano", "agx-orin-r35", "orin-nano-r36"])
def test_crash_restore_round_trip(tmp_path: Path, board: str) -> None:
    tree = build_board(tmp_path, board)
    dev = device(tree)
    before = tree.snapshot()
    dev.save_state()  # what controlled() does first; the process then "dies" locked:
    dev.set_freq_mhz(dev.available_freqs_mhz()[0])  # nothing restores
    assert tree.snapshot() != before
    saved = json.loads(dev.state_file.read_text())
    saved["pid"] = 2**22 + 12345  # a process that no longer exists
    dev.state_file.write_text(json.dumps(saved))
    assert "restored" in replay(dev.state_file, writer=FakeKernel(tree).write)
    assert tree.snapshot() == before and not dev.state_file.exists()


def test_5x_restores_requests_not_effective_range(tmp_path: Path) -> None:
    """No minimum request appears; a thermal cap at save time does not become the
    user's cap; nvpmodel's own max request comes back."""
    tree = build_board(tmp_path, "orin-nano-r36", nvpmodel_mode=1)  # 25W: 918 MHz request
    tree.set_thermal_cap(612000000)
    assert tree.read("max_freq") == "612000000" and tree.read("min_freq") == "306000000"
    before = tree.snapshot()
    dev = device(tree)
    assert dev.available_freqs_mhz()[-1] == 918.0  # the mode's ceiling, not the thermal cap
    with locked(dev, 408.0):
        assert load_state(tmp_path)["user_min_khz"] == 408000
    assert tree.snapshot() == before
    assert load_state(tmp_path)["user_min_khz"] == 0
    tree.set_thermal_cap(None)  # it cools down: the mode's ceiling is back
    assert tree.read("max_freq") == "918000000"


def test_fake_kernel_generations(tmp_path: Path) -> None:
    old = build_board(tmp_path / "r32", "nano")
    k = FakeKernel(old)
    k.write(old.devfreq / "max_freq", "460800000")
    with pytest.raises(OSError, match="Invalid argument"):
        k.write(old.devfreq / "min_freq", "921600000")  # 4.9: EINVAL
    new = build_board(tmp_path / "r36", "orin-nano-r36")
    k = FakeKernel(new)
    k.write(new.devfreq / "max_freq", "408000000")
    k.write(new.devfreq / "min_freq", "918000000")  # 5.x: accepted, read clamped
    assert (new.read("min_freq"), new.read("max_freq")) == ("408000000", "408000000")
    k.write(new.devfreq / "min_freq", "510000999")  # rounded down to kHz
    k.write(new.devfreq / "max_freq", "612000001")  # rounded up to kHz
    assert (new.read("min_freq"), new.read("max_freq")) == ("510000000", "612001000")
    k.write(new.devfreq / "max_freq", "0")  # no limit
    assert new.read("max_freq") == "1020000000"


def test_rules_follow_the_kernel(tmp_path: Path) -> None:
    assert device(build_board(tmp_path / "a", "nano")).rules.qos is False
    assert device(build_board(tmp_path / "b", "xavier-r35")).rules.qos is True
    tree = build_board(tmp_path / "c", "orin-nano-r36")
    (tmp_path / "c/proc/sys/kernel/osrelease").unlink()  # falls back to the L4T release
    assert device(tree).rules.qos is True and "L4T R36" in device(tree).rules.basis


def test_no_gpu_at_all_is_still_an_error(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="no Jetson GPU under"):
        JetsonDevice(tmp_path, nvpmodel_runner=None)


def test_another_socs_gpu_devfreq_is_not_a_jetson(tmp_path: Path) -> None:
    """A Rockchip board's Mali also sits at /sys/class/devfreq/ff9a0000.gpu."""
    dev = tmp_path / "sys/devices/platform/ff9a0000.gpu"
    node = dev / "devfreq/ff9a0000.gpu"
    node.mkdir(parents=True)
    (node / "available_frequencies").write_text("200000000 800000000\n")
    (tmp_path / "of").mkdir()
    (tmp_path / "of/compatible").write_bytes(b"rockchip,rk3399-mali\0arm,mali-t860\0")
    (dev / "of_node").symlink_to(tmp_path / "of")
    (node / "device").symlink_to(dev)
    (tmp_path / "sys/class/devfreq").mkdir(parents=True)
    (tmp_path / "sys/class/devfreq/ff9a0000.gpu").symlink_to(node)
    with pytest.raises(DeviceError, match="no Jetson GPU under"):
        JetsonDevice(tmp_path, nvpmodel_runner=None)
