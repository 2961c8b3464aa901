"""Jetson backend against fake L4T trees (tests/fakes/sysfs.py): discovery, power rails,
locking order, snapping, nvpmodel, restore on every exit path, permissions."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from fakes.sysfs import (
    NANO_FREQS_HZ,
    FakeKernel,
    FakeTree,
    build_nano,
    build_orin_nano,
)

from undercap.cli import main
from undercap.devices import controlled, locked
from undercap.devices.factory import replay
from undercap.devices.jetson import JetsonDevice
from undercap.devices.jetson.nvpmodel import parse_nvpmodel_conf, parse_nvpmodel_query
from undercap.devices.jetson.power import rail_kind
from undercap.devices.state import read_state
from undercap.errors import DeviceError, DevicePermissionError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _state_dir_in_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNDERCAP_STATE_DIR", raising=False)


@pytest.fixture
def nano(tmp_path: Path) -> FakeTree:
    return build_nano(tmp_path / "nano")


@pytest.fixture
def orin(tmp_path: Path) -> FakeTree:
    return build_orin_nano(tmp_path / "orin")


def device(tree: FakeTree, kernel: Optional[FakeKernel] = None, **kw) -> JetsonDevice:
    kernel = kernel or FakeKernel(tree)
    return JetsonDevice(tree.root, writer=kernel.write, nvpmodel_runner=None, **kw)


class CheckedKernel(FakeKernel):
    """Also asserts the devfreq invariant min_freq <= max_freq after every write."""

    def write(self, path: Path, value: str) -> None:
        super().write(path, value)
        assert int(self.tree.read("min_freq")) <= int(self.tree.read("max_freq"))


# --- discovery ----------------------------------------------------------------------------
def test_discovers_nano_gpu_and_frequencies(nano: FakeTree) -> None:
    dev = device(nano)
    assert dev.node.name == "57000000.gpu"
    assert dev.node.railgate_path == nano.railgate.resolve()
    assert dev.available_freqs_mhz() == tuple(f / 1e6 for f in NANO_FREQS_HZ)
    assert dev.available_freqs_mhz()[0] == 76.8 and dev.available_freqs_mhz()[-1] == 921.6
    info = dev.info()
    assert info.details["board"] == "NVIDIA Jetson Nano Developer Kit"
    assert info.details["l4t"] == "R32.7.1"
    assert info.details["gpu"] == "gm20b"
    assert info.memory_bytes == 4059272 * 1024


@pytest.mark.parametrize(("release", "node"), [("r36", "17000000.gpu"), ("r35", "17000000.ga10b")])
def test_discovers_orin_gpu_among_other_devfreq_nodes(
    tmp_path: Path, release: str, node: str
) -> None:
    tree = build_orin_nano(tmp_path, release=release)
    assert {p.name for p in (tmp_path / "sys/class/devfreq").iterdir()} >= {"15340000.vic"}
    dev = device(tree)
    assert dev.node.name == node
    assert dev.info().details["gpu"] == "ga10b"
    assert dev.info().details["board"] == "NVIDIA Jetson Orin Nano Developer Kit"


def test_no_jetson_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="no Jetson GPU under .*sys/class/devfreq"):
        JetsonDevice(tmp_path)


# --- power --------------------------------------------------------------------------------
def test_nano_iio_rails(nano: FakeTree) -> None:
    nano.set_rail("POM_5V_IN", 5000, 1200)
    nano.set_rail("POM_5V_GPU", 5000, 300)
    dev = device(nano)
    assert dev.power_w() == pytest.approx(6.0)
    assert dev.power.gpu is not None and dev.power.gpu.read_w() == pytest.approx(1.5)
    desc = dev.info().details["power"]
    assert desc["total_rail"] == "POM_5V_IN" and desc["gpu_rail"] == "POM_5V_GPU"
    assert desc["layout"] == ["iio"]
    assert dev.info().power_sensors == ("POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU")


def test_orin_hwmon_rails_by_label_not_index(tmp_path: Path) -> None:
    tree = build_orin_nano(tmp_path, hwmon_index=7, labels=("VDD_SOC", "VDD_IN", "VDD_CPU_GPU_CV"))
    tree.set_rail("VDD_IN", 5000, 1000)  # channel 2 here, hwmon7
    tree.set_rail("VDD_SOC", 5000, 200)
    dev = device(tree)
    assert dev.power_w() == pytest.approx(5.0)  # V x I of VDD_IN, wherever it sits
    assert dev.power.gpu is None  # no dedicated GPU rail on Orin Nano
    desc = dev.info().details["power"]
    assert desc["gpu_combined_rail"] == "VDD_CPU_GPU_CV (CPU+GPU+CV)"
    assert desc["layout"] == ["hwmon"]
    assert "sum of shunt voltages" not in dev.info().power_sensors


def test_total_is_sum_without_input_rail_and_nc_is_skipped(tmp_path: Path) -> None:
    tree = build_orin_nano(tmp_path, labels=("NC", "VDD_GPU_SOC", "VDD_CPU_CV"))
    tree.set_rail("VDD_GPU_SOC", 5000, 400)
    tree.set_rail("VDD_CPU_CV", 5000, 200)
    dev = device(tree)
    assert dev.info().power_sensors == ("VDD_GPU_SOC", "VDD_CPU_CV")
    assert dev.power_w() == pytest.approx(3.0)
    assert dev.info().details["power"]["total_rail"] == "sum of rails"


def test_missing_sensors(tmp_path: Path) -> None:
    dev = device(build_nano(tmp_path, rails=False))
    assert dev.info().power_sensors == ()
    with pytest.raises(DeviceError, match="no INA3221 power rails"):
        dev.power_w()


@pytest.mark.parametrize(
    ("label", "kind"),
    [
        ("POM_5V_IN", "total"),
        ("VDD_IN", "total"),
        ("POM_5V_GPU", "gpu"),
        ("VDD_SYS_GPU", "gpu"),
        ("VDD_CPU_GPU_CV", "combined:CPU+GPU+CV"),
        ("VDD_GPU_SOC", "combined:GPU+SOC"),
        ("POM_5V_CPU", "cpu"),
    ],
)
def test_rail_kinds(label: str, kind: str) -> None:
    assert rail_kind(label) == kind


# --- locking order, snapping --------------------------------------------------------------
def test_fake_kernel_rejects_min_above_max(nano: FakeTree) -> None:
    kernel = FakeKernel(nano)
    kernel.write(nano.devfreq / "max_freq", "460800000")
    with pytest.raises(OSError, match="Invalid argument"):
        kernel.write(nano.devfreq / "min_freq", "921600000")


def test_lock_writes_in_valid_order_up_and_down(nano: FakeTree) -> None:
    kernel = CheckedKernel(nano)
    dev = device(nano, kernel)
    with controlled(dev):
        assert dev.set_freq_mhz(230.4) == 230.4  # down: min is already low, max drops
        assert nano.settings()["min_freq"] == nano.settings()["max_freq"] == "230400000"
        kernel.writes.clear()
        assert dev.set_freq_mhz(921.6) == 921.6  # up: max must rise before min
        assert [w[0] for w in kernel.writes] == ["max_freq", "min_freq"]
        kernel.writes.clear()
        assert dev.set_freq_mhz(153.6) == 153.6  # down: min must drop before max
        assert [w[0] for w in kernel.writes] == ["min_freq", "max_freq"]
    assert kernel.rejected == []


def test_snapping_is_reported(nano: FakeTree) -> None:
    kernel = FakeKernel(nano, cap_hz=614400000)  # e.g. thermal capping
    dev = device(nano, kernel)
    with controlled(dev):
        assert dev.set_freq_mhz(921.6) == 614.4
        assert dev.last_snap == {"requested_mhz": 921.6, "step_mhz": 921.6, "actual_mhz": 614.4}
        assert dev.set_freq_mhz(600) == 614.4  # not a step: nearest step is written
        assert dev.last_snap == {"requested_mhz": 600.0, "step_mhz": 614.4, "actual_mhz": 614.4}
        dev.set_freq_mhz(460.8)
        assert dev.last_snap is None


# --- nvpmodel -----------------------------------------------------------------------------
def test_nvpmodel_5w_caps_available_frequencies(tmp_path: Path) -> None:
    tree = build_nano(tmp_path, nvpmodel_mode=1)
    dev = device(tree)
    assert dev.available_freqs_mhz()[-1] == 614.4  # 640 MHz cap snaps to the 614.4 step
    nvp = dev.info().details["nvpmodel"]
    assert (nvp["mode_id"], nvp["mode_name"], nvp["gpu_max_freq_mhz"]) == (1, "5W", 640.0)
    assert nvp["source"] == "/var/lib/nvpmodel/status"
    assert dev.info().details["all_freqs_mhz"][-1] == 921.6


def test_nvpmodel_query_runner_is_used(tmp_path: Path) -> None:
    tree = build_orin_nano(tmp_path, nvpmodel_mode=2)
    calls = []

    def runner(args: List[str]) -> str:
        calls.append(args)
        return "NV Fan Mode:quiet\nNV Power Mode: 7W\n3\n"

    dev = JetsonDevice(tree.root, nvpmodel_runner=runner)
    assert calls == [["-q"]]
    nvp = dev.info().details["nvpmodel"]
    assert (nvp["mode_id"], nvp["mode_name"], nvp["source"]) == (3, "7W", "nvpmodel -q")
    assert dev.available_freqs_mhz() == (306.0, 408.0)


def test_nvpmodel_parsers() -> None:
    assert parse_nvpmodel_query("NV Power Mode: MAXN\n0\n") == ("MAXN", 0)
    assert parse_nvpmodel_query("NV Fan Mode:quiet\nNV Power Mode: 15W\n0\n") == ("15W", 0)
    assert parse_nvpmodel_query("nvpmodel: not found") is None
    modes = parse_nvpmodel_conf(
        "< POWER_MODEL ID=0 NAME=MAXN >\nGPU MAX_FREQ -1\n< POWER_MODEL ID=1 NAME=5W >\n"
        "GPU MAX_FREQ 640000000 # cap\n< PARAM TYPE=CLOCK NAME=GPU >\nMAX_FREQ /sys/x\n"
        "< PM_CONFIG DEFAULT=0 >\n"
    )
    assert modes == {
        0: {"name": "MAXN", "gpu_max_freq_hz": None, "gpu_min_freq_hz": None},
        1: {"name": "5W", "gpu_max_freq_hz": 640000000, "gpu_min_freq_hz": None},
    }


# --- restore --------------------------------------------------------------------------------
def test_state_file_written_before_first_change(nano: FakeTree) -> None:
    kernel = FakeKernel(nano)
    before = nano.settings()
    seen: List[dict] = []

    def writer(path: Path, value: str) -> None:
        if not seen:
            seen.append(read_state(dev.state_file).state)
        kernel.write(path, value)

    dev = JetsonDevice(nano.root, writer=writer, nvpmodel_runner=None)
    assert dev.state_file == nano.root / "var/lib/undercap/state-jetson-57000000.gpu.json"
    with locked(dev, 460.8):
        pass
    assert seen[0]["min_freq_hz"] == int(before["min_freq"])
    assert seen[0]["max_freq_hz"] == int(before["max_freq"])
    assert seen[0]["railgate_enable"] == "1" and seen[0]["governor"] == "nvhost_podgov"


def test_restore_after_normal_exit_and_exception(nano: FakeTree) -> None:
    before = nano.settings()
    kernel = CheckedKernel(nano)
    dev = device(nano, kernel)
    with locked(dev, 844.8) as f:
        assert f == 844.8
        assert nano.settings()["railgate_enable"] == "0"
        assert dev.state_file.is_file()
    assert nano.settings() == before and not dev.state_file.exists()
    with pytest.raises(RuntimeError), locked(dev, 230.4):
        raise RuntimeError("training failed")
    assert nano.settings() == before and not dev.state_file.exists()
    assert kernel.rejected == []


def test_nested_locks_restore_level_by_level(orin: FakeTree) -> None:
    before = orin.settings()
    dev = device(orin, CheckedKernel(orin))
    with locked(dev, 1020):
        with locked(dev, 306):
            assert orin.read("cur_freq") == "306000000"
        assert orin.read("min_freq") == orin.read("max_freq") == "1020000000"
        assert dev.state_file.is_file()
    assert orin.settings() == before and not dev.state_file.exists()


def test_set_outside_controlled_is_refused(nano: FakeTree) -> None:
    with pytest.raises(DeviceError, match="outside"):
        device(nano).set_freq_mhz(460.8)


def test_read_only_never_writes(nano: FakeTree) -> None:
    kernel = FakeKernel(nano)
    dev = device(nano, kernel, read_only=True)
    assert dev.info().control_permitted is False
    with controlled(dev):
        (nano.devfreq / "max_freq").write_text("460800000\n")  # someone else changes it
        with pytest.raises(DevicePermissionError, match="read-only"):
            dev.set_freq_mhz(460.8)
        assert dev.power_w() > 0 and dev.current_freq_mhz() == 76.8
    assert kernel.writes == [] and not dev.state_file.exists()


def test_root_only_files(nano: FakeTree, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a non-root user: 0644 root-owned attributes are not writable."""
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, m: bool(os.stat(p).st_mode & 0o002) if m & os.W_OK else real_access(p, m),
    )
    dev = device(nano, FakeKernel(nano, unprivileged=True))
    info = dev.info()
    assert info.control_permitted is False and "root" in info.details["control"]
    before = nano.settings()
    with pytest.raises(DevicePermissionError) as e, locked(dev, 460.8):
        pass
    msg = str(e.value)
    assert "\n" not in msg and "min_freq" in msg and "root (sudo)" in msg and "--read-only" in msg
    assert nano.settings() == before and not dev.state_file.exists()


def test_kernel_permission_error_becomes_one_line(nano: FakeTree) -> None:
    dev = device(
        nano, FakeKernel(nano, unprivileged=True)
    )  # os.access says yes (root), write says no
    denied = r"cannot write .*railgate_enable.*root"
    with pytest.raises(DevicePermissionError, match=denied), locked(dev, 460.8):
        pass


def test_leftover_state_file_must_be_restored_first(nano: FakeTree) -> None:
    dev = device(nano)
    with controlled(dev):
        dev.set_freq_mhz(230.4)
        saved = json.loads(dev.state_file.read_text())
    saved["pid"] = 2**22 + 12345  # a process that no longer exists
    dev.state_file.write_text(json.dumps(saved))
    stale = "undercap restore --device jetson --sysfs-root"
    with pytest.raises(DeviceError, match=stale), controlled(dev):
        pass
    saved["boot_id"] = "another-boot"  # from before a reboot: stale, removed silently
    dev.state_file.write_text(json.dumps(saved))
    with controlled(dev):
        pass
    assert not dev.state_file.exists()


# --- signals: subprocess holding a lock -----------------------------------------------------
_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from fakes.sysfs import FakeKernel, FakeTree
    from undercap.devices import locked
    from undercap.devices.jetson import JetsonDevice
    tree = FakeTree.load(Path(sys.argv[1]), sys.argv[2])
    kernel = FakeKernel(tree, log=Path(sys.argv[3]))
    dev = JetsonDevice(tree.root, writer=kernel.write, nvpmodel_runner=None)
    with locked(dev, float(sys.argv[4])) as f:
        print("locked", f, flush=True)
        time.sleep(60)
    """
)


def _hold_lock(tree: FakeTree, log: Path, freq: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO / "src")])}
    env.pop("UNDERCAP_STATE_DIR", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tree.root), tree.node, str(log), str(freq)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
    )
    line = proc.stdout.readline()
    assert line.startswith("locked"), proc.stderr.read()
    return proc


def _log_pairs(log: Path) -> List[Tuple[str, int]]:
    return [(a, int(v)) for a, v in (ln.split() for ln in log.read_text().splitlines())]


def _min_le_max_throughout(start: Dict[str, Optional[str]], writes: List[Tuple[str, int]]) -> bool:
    """min_freq <= max_freq after every write (a max of 0 is "no limit" on 5.x)."""
    lo, hi = int(start["min_freq"]), int(start["max_freq"])
    for attr, v in writes:
        lo, hi = (v, hi) if attr == "min_freq" else (lo, v) if attr == "max_freq" else (lo, hi)
        if hi and lo > hi:
            return False
    return True


def test_sigterm_restores(orin: FakeTree, tmp_path: Path) -> None:
    before = orin.settings()
    log = tmp_path / "writes.log"
    proc = _hold_lock(orin, log, 1020.0)
    assert orin.read("min_freq") == "1020000000" and orin.settings()["railgate_enable"] == "0"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert orin.settings() == before
    assert not (orin.root / "var/lib/undercap/state-jetson-17000000.gpu.json").exists()
    assert _min_le_max_throughout(before, _log_pairs(log))


def test_sigkill_then_undercap_restore(nano: FakeTree, tmp_path: Path, capsys) -> None:
    before = nano.settings()
    proc = _hold_lock(nano, tmp_path / "writes.log", 307.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=20)
    state_file = nano.root / "var/lib/undercap/state-jetson-57000000.gpu.json"
    assert state_file.is_file() and nano.read("max_freq") == "307200000"  # left locked
    assert main(["restore", "--device", "jetson", "--sysfs-root", str(nano.root)]) == 0
    assert "restored the settings" in capsys.readouterr().out
    assert nano.settings() == before and not state_file.exists()


def test_replay_writes_in_valid_order(nano: FakeTree, tmp_path: Path) -> None:
    proc = _hold_lock(nano, tmp_path / "writes.log", 921.6)
    proc.kill()
    proc.wait(timeout=20)
    before = {"min_freq": "76800000", "max_freq": "921600000", "governor": "nvhost_podgov",
              "railgate_enable": "1"}  # fmt: skip
    kernel = CheckedKernel(nano)
    state_file = nano.root / "var/lib/undercap/state-jetson-57000000.gpu.json"
    assert "restored" in replay(state_file, writer=kernel.write)
    assert nano.settings() == before and kernel.rejected == [] and not state_file.exists()


def test_replay_refuses_while_owner_runs(nano: FakeTree, tmp_path: Path) -> None:
    proc = _hold_lock(nano, tmp_path / "writes.log", 460.8)
    try:
        state_file = nano.root / "var/lib/undercap/state-jetson-57000000.gpu.json"
        with pytest.raises(DeviceError, match=f"process {proc.pid} .* still running"):
            replay(state_file)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert nano.read("max_freq") == "921600000"
