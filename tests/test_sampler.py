"""PowerSampler and PowerStats: virtual-time sampling on simulated devices, a polling
thread on real ones, robust peak, energy."""

import math
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np
import pytest

from undercap.artifacts.workload import Workload
from undercap.devices.base import Device, DeviceInfo
from undercap.devices.sampler import PowerSampler, PowerStats, summarize
from undercap.devices.simulated import SimulatedDevice
from undercap.errors import DeviceError

RESNET18 = Workload("resnet18", (3, 32, 32), 3.329e9, 4.70e6, 43.0e6, 11_173_962, 297)


# --- simulated devices: virtual time ------------------------------------------------------
def test_sampler_on_sim_device_matches_the_model() -> None:
    dev = SimulatedDevice.from_name("jetson-nano", seed=0)
    dev.set_freq_mhz(921.6)
    dev.wait_s(3.0)  # idle before the window must not count
    model = dev.model_step(RESNET18, 128, 921.6)
    with PowerSampler(dev, rate_hz=100.0) as s:
        t0 = dev.now_s()
        for _ in range(15):
            dev.account_step(RESNET18, 128)
        t1 = dev.now_s()
    dev.wait_s(5.0)  # nor idle after it
    st = s.stats()
    assert st.duration_s == pytest.approx(t1 - t0)
    assert st.n_samples == math.floor((t1 - t0) * 100 + 1e-9) + 2  # grid + end reading
    assert st.mean_w == pytest.approx(model.power_w, rel=0.01)
    assert st.energy_j == pytest.approx(st.mean_w * st.duration_s, rel=1e-9)
    assert st.energy_j == pytest.approx(dev.busy_energy_j(t0, t1), rel=0.01)
    assert st.mean_w < st.peak_w < st.max_raw_w  # robust peak between mean and raw max
    assert st.peak_w < model.power_w * 1.2
    assert not st.energy_from_counter
    times = [t for t, _ in s.samples()]
    assert times[0] == t0 and times[-1] == t1 and times == sorted(times)


def test_sampler_is_deterministic_and_independent_of_host_speed() -> None:
    def run(pause_s: float) -> PowerStats:
        dev = SimulatedDevice.from_name("jetson-tx2nx", seed=5)
        with PowerSampler(dev, rate_hz=200.0) as s:
            for b in (32, 32, 64, 64, 64):
                dev.account_step(RESNET18, b)
                time.sleep(pause_s)
        return s.stats()

    assert run(0.0) == run(0.01)


def test_sampler_spanning_idle_and_busy_and_window_mean() -> None:
    dev = SimulatedDevice.from_name("jetson-orin-nano", seed=2)
    busy = dev.model_step(RESNET18, 64, dev.current_freq_mhz()).power_w
    with PowerSampler(dev, rate_hz=50.0) as s:
        dev.wait_s(10.0)
        assert s.window_mean_w(2.0) == pytest.approx(dev.spec.idle_board_w, rel=0.03)
        t_busy = dev.now_s()
        while dev.now_s() < t_busy + 10.0:
            dev.account_step(RESNET18, 64)
        assert s.window_mean_w(2.0) == pytest.approx(busy, rel=0.03)
    st = s.stats()
    assert dev.spec.idle_board_w < st.mean_w < busy
    assert st.energy_j == pytest.approx(dev.busy_energy_j(0.0, dev.now_s()), rel=0.01)
    assert st.peak_w == pytest.approx(busy, rel=0.2)


def test_nested_samplers_and_empty_window() -> None:
    dev = SimulatedDevice.from_name("jetson-nano")
    with PowerSampler(dev) as outer:
        with PowerSampler(dev) as inner:
            pass
        dev.account_step(RESNET18, 32)
    one = inner.stats()
    assert one.n_samples == 1 and one.duration_s == 0.0 and one.energy_j == 0.0
    assert one.peak_w == one.max_raw_w == one.mean_w
    assert outer.stats().duration_s == pytest.approx(dev.now_s())


# --- the statistics --------------------------------------------------------------------------
def test_summarize_constant_ramp_and_spike() -> None:
    t = np.linspace(0.0, 2.0, 201)
    flat = summarize(t, np.full_like(t, 5.0))
    assert flat.peak_w == pytest.approx(5.0) and flat.max_raw_w == 5.0
    assert flat.energy_j == pytest.approx(10.0)
    ramp = summarize(t, 2.0 * t)  # trapezoid integral of a line is exact
    assert ramp.energy_j == pytest.approx(4.0) and ramp.mean_w == pytest.approx(2.0)
    assert ramp.peak_w == pytest.approx(2.0 * (2.0 - 0.1))  # mean of the last 0.2 s
    spiky = np.full_like(t, 5.0)
    spiky[100] = 9.0  # one 10 ms spike: raw max sees it, a 0.2 s average barely does
    st = summarize(t, spiky)
    assert st.max_raw_w == 9.0 and st.peak_w == pytest.approx(5.0 + 4.0 * 0.01 / 0.2)
    short = summarize(t[:5], np.array([4.0, 6.0, 4.0, 6.0, 4.0]))  # shorter than the window
    assert short.peak_w == pytest.approx(short.mean_w) and short.max_raw_w == 6.0


def test_bad_rate_is_rejected() -> None:
    dev = SimulatedDevice.from_name("jetson-nano")
    for rate in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            PowerSampler(dev, rate_hz=rate)


# --- real devices: a polling thread on wall time -------------------------------------
class FakeBoard(Device):
    """A device with a wall-clock power signal: 6 W + a 20 Hz, 1 W sine."""

    name = "fake"

    def __init__(self, energy_counter: bool = False, fail_after: Optional[int] = None) -> None:
        self.t0 = time.monotonic()
        self.counter = energy_counter
        self.calls = 0
        self.fail_after = fail_after

    def power_w(self) -> float:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise OSError("sensor vanished")
        return 6.0 + math.sin(2 * math.pi * 20 * (time.monotonic() - self.t0))

    def energy_j(self) -> Optional[float]:
        return 7.0 * (time.monotonic() - self.t0) if self.counter else None

    def available_freqs_mhz(self) -> Tuple[float, ...]:
        return (100.0,)

    def current_freq_mhz(self) -> float:
        return 100.0

    def set_freq_mhz(self, freq_mhz: float) -> float:
        return 100.0

    def save_state(self) -> Dict[str, Any]:
        return {}

    def restore_state(self, state: Dict[str, Any]) -> None:
        pass

    def memory_bytes(self) -> int:
        return 1

    def info(self) -> DeviceInfo:
        return DeviceInfo("fake", "fake", False, (100.0,), 1, ("IN",), self.counter, False)


def test_sampler_thread_on_a_real_device() -> None:
    dev = FakeBoard()
    with PowerSampler(dev, rate_hz=400.0) as s:
        time.sleep(0.3)
        assert 5.0 < s.window_mean_w(0.1) < 7.0  # works while running
    st = s.stats()
    assert 0.28 < st.duration_s < 0.6
    assert st.n_samples >= 40  # ~120 expected; allow for a busy machine
    assert st.mean_w == pytest.approx(6.0, abs=0.3)
    assert st.max_raw_w > 6.8 and st.peak_w < st.max_raw_w
    assert st.energy_j == pytest.approx(st.mean_w * st.duration_s, rel=1e-9)
    times = [t for t, _ in s.samples()]
    assert times == sorted(times)


def test_sampler_uses_the_energy_counter_where_present() -> None:
    dev = FakeBoard(energy_counter=True)
    with PowerSampler(dev, rate_hz=200.0) as s:
        time.sleep(0.1)
    st = s.stats()
    assert st.energy_from_counter
    assert st.mean_w == pytest.approx(7.0, rel=0.1)  # the counter says 7 W, readings 6 W


def test_sensor_failure_is_reported() -> None:
    board = FakeBoard(fail_after=3)
    with pytest.raises(DeviceError, match="sensor vanished"), PowerSampler(board, rate_hz=500.0):
        time.sleep(0.05)
