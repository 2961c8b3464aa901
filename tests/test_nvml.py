"""NVML backend against a fake pynvml module (tests/fakes/pynvml.py)."""

import sys
from pathlib import Path

import pytest
from fakes import pynvml as fake
from fakes.pynvml import FakeGpu

from undercap.devices import controlled, locked
from undercap.devices.factory import replay
from undercap.devices.nvml import NvmlDevice, nvml_device_count, nvml_error
from undercap.devices.state import read_state
from undercap.errors import DeviceError, DevicePermissionError


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("UNDERCAP_STATE_DIR", str(tmp_path / "state"))
    fake.reset()


def test_fake_mirrors_real_error_classes() -> None:
    e = fake.NVMLError(fake.NVML_ERROR_NO_PERMISSION)
    assert type(e).__name__ == "NVMLError_NoPermission" and e.value == 4
    assert isinstance(fake.NVMLError_NotSupported(), fake.NVMLError)
    real = pytest.importorskip("pynvml")  # nvidia-ml-py, if installed: same names
    for name in ("NVMLError_NoPermission", "NVMLError_NotSupported", "NVMLError_LibraryNotFound"):
        assert hasattr(real, name) and hasattr(fake, name)
    for fn in [n for n in dir(fake) if n.startswith("nvml")]:
        assert hasattr(real, fn), fn
    assert real.NVML_FI_DEV_POWER_INSTANT == fake.NVML_FI_DEV_POWER_INSTANT


def test_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(DeviceError, match=r"undercap\[nvml\]"):
        NvmlDevice(0)


def test_reads_clocks_power_energy_memory() -> None:
    dev = NvmlDevice(0, nvml=fake)
    assert dev.available_freqs_mhz() == (345.0, 510.0, 1005.0, 1500.0, 1950.0, 1965.0, 1980.0)
    assert dev.current_freq_mhz() == 345.0
    assert dev.power_w() == pytest.approx(69.0)  # the instant field, not the 1 s average
    assert dev.energy_j() == pytest.approx(123456.789)
    assert dev.memory_bytes() == 85520809984
    info = dev.info()
    assert info.backend == "nvml" and info.name == "nvml:0" and info.has_energy_counter
    assert info.details["power_source"] == "instant field"
    assert info.details["power_limit_constraints_w"] == [200.0, 700.0]
    assert info.details["memory_clock_mhz"] == 2619
    assert info.control_permitted is False and "--allow-clock-control" in info.details["control"]
    dev.close()
    assert fake.STATE.initialized == 0


def test_power_falls_back_and_energy_optional() -> None:
    fake.reset([FakeGpu(supports_instant=False, energy_mj=None)])
    dev = NvmlDevice(0, nvml=fake)
    assert dev.power_w() == pytest.approx(71.0)
    assert dev.energy_j() is None
    info = dev.info()
    assert info.details["power_source"] == "power usage (average)"
    assert not info.has_energy_counter


def test_read_only_by_default() -> None:
    dev = NvmlDevice(0, nvml=fake)
    with controlled(dev), pytest.raises(DevicePermissionError, match="--allow-clock-control"):
        dev.set_freq_mhz(1500)
    assert fake.STATE.gpus[0].calls == []


def test_lock_and_reset_with_state_file() -> None:
    gpu = fake.STATE.gpus[0]
    dev = NvmlDevice(0, nvml=fake, allow_clock_control=True)
    with locked(dev, 1490) as f:
        assert f == 1500.0 and gpu.locked == (1500, 1500)
        saved = read_state(dev.state_file)
        assert saved.backend == "nvml" and saved.state["locked_mhz"] is None
        assert saved.open_args == {"index": 0, "uuid": gpu.uuid}
    assert gpu.locked is None and not dev.state_file.exists()
    assert [c[0] for c in gpu.calls] == [
        "nvmlDeviceSetGpuLockedClocks",
        "nvmlDeviceResetGpuLockedClocks",
    ]
    with pytest.raises(ValueError), locked(dev, 510):
        raise ValueError("boom")
    assert gpu.locked is None and not dev.state_file.exists()


def test_nested_locks() -> None:
    gpu = fake.STATE.gpus[0]
    dev = NvmlDevice(0, nvml=fake, allow_clock_control=True)
    with locked(dev, 1980):
        with locked(dev, 510):
            assert gpu.locked == (510, 510)
        assert gpu.locked == (1980, 1980)
    assert gpu.locked is None


def test_no_permission_is_one_line_with_fix() -> None:
    fake.reset([FakeGpu(can_lock=False)])
    dev = NvmlDevice(0, nvml=fake, allow_clock_control=True)
    with pytest.raises(DevicePermissionError) as e, locked(dev, 1500):
        pass
    assert "\n" not in str(e.value) and "root" in str(e.value)
    assert not dev.state_file.exists()


def test_not_supported_maps_to_device_error() -> None:
    fake.reset([FakeGpu(supports_lock=False)])
    dev = NvmlDevice(0, nvml=fake, allow_clock_control=True)
    with pytest.raises(DeviceError, match="does not support") as e, locked(dev, 1500):
        pass
    assert not isinstance(e.value, DevicePermissionError)


def test_library_missing_and_bad_index() -> None:
    fake.reset(library=False)
    with pytest.raises(DeviceError, match="install the NVIDIA driver"):
        NvmlDevice(0, nvml=fake)
    with pytest.raises(DeviceError, match="install the NVIDIA driver"):
        nvml_device_count(fake)
    fake.reset([FakeGpu(), FakeGpu(uuid="GPU-2")])
    assert nvml_device_count(fake) == 2
    with pytest.raises(DeviceError, match=r"nvml:5 does not exist.*2 GPU"):
        NvmlDevice(5, nvml=fake)
    assert fake.STATE.initialized == 0


def test_error_mapping_covers_unknown_codes() -> None:
    err = nvml_error(fake, fake.NVMLError(fake.NVML_ERROR_TIMEOUT), "reading power")
    assert type(err) is DeviceError and "reading power failed" in str(err)


def test_restore_after_crash_unlocks(tmp_path: Path) -> None:
    gpu = fake.STATE.gpus[0]
    dev = NvmlDevice(0, nvml=fake, allow_clock_control=True)
    dev.save_state()
    dev.set_freq_mhz(1005)  # then the process "dies": no restore_state
    state_file = dev.state_file
    assert gpu.locked == (1005, 1005) and state_file.is_file()
    dev2 = NvmlDevice(0, nvml=fake, allow_clock_control=True)
    with pytest.raises(DeviceError, match="undercap restore --state-file"), controlled(dev2):
        pass
    assert "restored" in replay(state_file, force=True, nvml=fake)
    assert gpu.locked is None and not state_file.exists()


def test_replay_checks_uuid(tmp_path: Path) -> None:
    dev = NvmlDevice(0, nvml=fake, allow_clock_control=True)
    dev.save_state()
    dev.set_freq_mhz(1005)
    fake.reset([FakeGpu(uuid="GPU-other")])
    with pytest.raises(DeviceError, match="renumbered"):
        replay(dev.state_file, force=True, nvml=fake)
