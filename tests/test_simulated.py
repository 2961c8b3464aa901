"""Simulated Jetsons: frequency tables, clock control, physics, memory, readings."""

import numpy as np
import pytest

from undercap.artifacts.workload import Workload
from undercap.devices import controlled, locked, open_device
from undercap.devices.simulated import SimulatedDevice, known_names
from undercap.errors import DeviceError, DeviceOutOfMemoryError, DevicePermissionError

DEVICES = ("jetson-nano", "jetson-tx2nx", "jetson-orin-nano", "jetson-xavier-nx")

# ResNet18 on 32x32 inputs as models.workload_of measures it (FlopCounterMode counts 2
# FLOPs per multiply-add: ~0.56 GMAC forward -> ~3.3 GFLOP forward + backward).
RESNET18 = Workload("resnet18", (3, 32, 32), 3.329e9, 4.70e6, 43.0e6, 11_173_962, 297)
# The same network with the rounder numbers of the design brief (0.556e9 x 3 FLOPs,
# 10 MB of activations, 3x traffic, 200 kernels).
RESNET18_BRIEF = Workload("resnet18", (3, 32, 32), 3 * 0.556e9, 10e6, 30e6, 11_170_000, 200)
SMALL = Workload("small-cnn", (1, 8, 8), 2.7e6, 36e3, 230e3, 56_554, 68)


@pytest.fixture
def nano() -> SimulatedDevice:
    return SimulatedDevice.from_name("jetson-nano", seed=0)


# --- names, tables, info --------------------------------------------------------------
def test_bundled_names_and_unknown_name() -> None:
    assert known_names() == sorted(DEVICES)
    with pytest.raises(DeviceError, match="sim:jetson-nano.*sim:jetson-tx2nx"):
        SimulatedDevice.from_name("jetson-xavier")
    assert SimulatedDevice.from_name("sim:jetson-nano").name == "sim:jetson-nano"


def test_frequency_tables_match_l4t() -> None:
    nano = SimulatedDevice.from_name("jetson-nano")
    assert nano.available_freqs_mhz() == pytest.approx([76.8 * k for k in range(1, 13)])
    tx2 = SimulatedDevice.from_name("jetson-tx2nx").available_freqs_mhz()
    assert len(tx2) == 13 and tx2[0] == 114.75 and tx2[-1] == 1300.5
    orin = SimulatedDevice.from_name("jetson-orin-nano").available_freqs_mhz()
    assert orin[-1] == 624.75 and list(orin) == sorted(orin)


@pytest.mark.parametrize(
    ("name", "rail"),
    [
        ("jetson-nano", "POM_5V_IN"),
        ("jetson-tx2nx", "VDD_IN"),
        ("jetson-orin-nano", "VDD_IN"),
        ("jetson-xavier-nx", "VDD_IN"),
    ],
)
def test_info_says_simulated_and_names_real_rails(name: str, rail: str) -> None:
    dev = open_device(f"sim:{name}", seed=3)
    info = dev.info()
    assert info.is_simulated and info.backend == "simulated" and dev.is_simulated
    assert info.details["simulated"] is True and "SIMULATED" in info.details["note"]
    assert info.details["spec_file"] == f"{name}.toml" and info.details["spec_sources"]
    assert info.power_sensors[0] == rail and len(info.power_sensors) == 3
    assert not info.has_energy_counter and dev.energy_j() is None
    assert info.memory_bytes == dev.memory_bytes() < info.details["memory_total_bytes"]
    assert info.to_dict()["freqs_mhz"] == list(dev.available_freqs_mhz())


def test_bad_spec_file_is_a_device_error(tmp_path) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "broken"\ndescription = "x"\nsources = ["y"]\n')
    with pytest.raises(DeviceError, match="missing key 'gpu.freqs_hz'"):
        SimulatedDevice.from_name(str(bad))
    bad.write_text("name = [")
    with pytest.raises(DeviceError, match="not valid TOML"):
        SimulatedDevice.from_name(str(bad))


# --- clock control ---------------------------------------------------------------------
def test_set_freq_snaps_to_nearest_step(nano: SimulatedDevice) -> None:
    assert nano.current_freq_mhz() == 921.6  # governor under load: top step
    assert nano.set_freq_mhz(900) == 921.6
    assert nano.set_freq_mhz(80) == 76.8
    assert nano.set_freq_mhz(420) == 384.0  # 384.0 is 36 away, 460.8 is 40.8
    assert nano.current_freq_mhz() == 384.0
    for bad in (float("nan"), -5.0, 0.0):
        with pytest.raises(DeviceError):
            nano.set_freq_mhz(bad)


def test_controlled_restores_on_exit_and_on_exception(nano: SimulatedDevice) -> None:
    with locked(nano, 470) as actual:
        assert actual == 460.8 and nano.current_freq_mhz() == 460.8
    assert nano.save_state()["locked_freq_mhz"] is None
    nano.set_freq_mhz(614.4)
    with pytest.raises(RuntimeError, match="boom"), controlled(nano):
        nano.set_freq_mhz(76.8)
        raise RuntimeError("boom")
    assert nano.current_freq_mhz() == 614.4


def test_read_only_refuses_clock_changes() -> None:
    dev = open_device("sim:jetson-nano", read_only=True)
    assert not dev.info().control_permitted
    with controlled(dev), pytest.raises(DevicePermissionError, match="read-only"):
        dev.set_freq_mhz(76.8)
    assert dev.current_freq_mhz() == 921.6
    with pytest.raises(DevicePermissionError):
        dev.restore_state({"locked_freq_mhz": 76.8})


# --- physics ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", DEVICES)
@pytest.mark.parametrize("workload", [RESNET18, SMALL], ids=["resnet18", "small-cnn"])
def test_power_and_time_are_monotonic(name: str, workload: Workload) -> None:
    dev = SimulatedDevice.from_name(name)
    freqs = dev.available_freqs_mhz()
    batches = [8, 16, 32, 64, 128, 256]
    p = np.array([[dev.model_step(workload, b, f).power_w for f in freqs] for b in batches])
    t = np.array(
        [[dev.model_step(workload, b, f).time_per_sample_s for f in freqs] for b in batches]
    )
    assert (np.diff(p, axis=1) > 0).all(), "power must grow with frequency"
    assert (np.diff(p, axis=0) > 0).all(), "power must grow with batch size"
    assert (np.diff(t, axis=1) < 0).all(), "time per sample must fall with frequency"
    assert (np.diff(t, axis=0) < 0).all(), "time per sample must fall with batch size"
    gains = -np.diff(t, axis=0)  # what each doubling of b saves
    assert (np.diff(gains, axis=0) < 0).all(), "diminishing returns in b"
    assert (p > dev.spec.idle_board_w).all()


def test_figure1_small_batch_runs_faster_clock_under_a_power_limit(nano) -> None:
    """Paper Fig. 1 (ResNet18, 32x32, Jetson Nano): under a low power limit the
    highest feasible frequency is higher for a small batch than for the largest.
    With 12 discrete steps the two can coincide at some limits, never reverse."""

    def fmax_feasible(w: Workload, b: int, limit_w: float) -> float:
        ok = [f for f in nano.available_freqs_mhz() if nano.model_step(w, b, f).power_w <= limit_w]
        return max(ok)

    limits = np.arange(3.5, 6.0, 0.1)  # between the lowest and the highest b=256 power
    for w in (RESNET18, RESNET18_BRIEF):
        small = np.array([fmax_feasible(w, 32, lim) for lim in limits])
        large = np.array([fmax_feasible(w, 256, lim) for lim in limits])
        assert (small >= large).all()
        assert (small > large).mean() >= 0.6
    assert fmax_feasible(RESNET18, 32, 5.0) > fmax_feasible(RESNET18, 256, 5.0)


def test_absolute_levels_are_plausible_for_a_nano(nano) -> None:
    assert 1.25 <= nano.spec.idle_board_w <= 2.0
    fmax, fmin = nano.available_freqs_mhz()[-1], nano.available_freqs_mhz()[0]
    top = nano.model_step(RESNET18, 256, fmax)
    assert 20 <= 1 / top.time_per_sample_s <= 200  # samples/s at max clock
    assert 5.0 <= top.power_w <= 10.0
    low = nano.model_step(RESNET18, 256, fmin)
    assert low.power_w < 4.0 and low.time_per_sample_s > 8 * top.time_per_sample_s
    assert top.compute_time_s > top.memory_time_s  # ResNet18 is compute-bound here


def test_wider_gpu_needs_larger_batches_to_fill() -> None:
    occ = {n: SimulatedDevice.from_name(n).model_step(RESNET18, 32, 1e3).occupancy for n in DEVICES}
    assert occ["jetson-nano"] > occ["jetson-tx2nx"] > occ["jetson-orin-nano"]


# --- memory ----------------------------------------------------------------------------
def test_memory_limit_rules_out_big_batches_on_the_nano(nano) -> None:
    nano.check_fits(RESNET18, 256)
    assert nano.model_step(RESNET18, 256, 921.6).fits
    for b in (1024, 2048):
        assert not nano.model_step(RESNET18, b, 921.6).fits
    with pytest.raises(DeviceOutOfMemoryError) as e:
        nano.check_fits(RESNET18, 1024)
    msg = str(e.value)
    assert "\n" not in msg and "GB" in msg and "smaller batch" in msg and "at most 512" in msg
    t0 = nano.now_s()
    with pytest.raises(DeviceOutOfMemoryError):
        nano.account_step(RESNET18, 2048)
    assert nano.now_s() == t0  # nothing was charged
    orin = SimulatedDevice.from_name("jetson-orin-nano")
    orin.check_fits(RESNET18, 1024)  # 8 GB module holds what the Nano cannot


# --- virtual clock and readings --------------------------------------------------------
def test_account_step_advances_the_virtual_clock(nano) -> None:
    nano.set_freq_mhz(614.4)
    model = nano.model_step(RESNET18, 64, 614.4)
    for _ in range(50):
        nano.account_step(RESNET18, 64)
    assert nano.now_s() == pytest.approx(50 * model.step_time_s, rel=1e-12)
    assert model.step_time_s == pytest.approx(64 * model.time_per_sample_s)
    nano.wait_s(2.0)
    assert nano.now_s() == pytest.approx(50 * model.step_time_s + 2.0)


def test_readings_follow_the_model_with_noise_and_ripple(nano) -> None:
    model = nano.model_step(RESNET18, 128, 921.6)
    for _ in range(20):
        nano.account_step(RESNET18, 128)
    busy_end = nano.now_s()
    nano.wait_s(10.0)
    busy = nano.power_readings_w(np.linspace(0.001, busy_end, 4000))
    idle = nano.power_readings_w(np.linspace(busy_end + 0.01, nano.now_s(), 2000))
    assert busy.mean() == pytest.approx(model.power_w, rel=0.01)
    assert idle.mean() == pytest.approx(nano.spec.idle_board_w, rel=0.01)
    assert idle.std() == pytest.approx(0.03 + 0.015 * nano.spec.idle_board_w, rel=0.1)
    assert busy.std() > 2 * idle.std()  # ripple on top of noise while stepping
    assert busy.max() > model.power_w + 0.3  # raw maxima overstate the mean clearly
    assert nano.power_at_w(busy_end + 5.0) < model.power_w - 1.0
    assert nano.power_at_w(-1.0) == pytest.approx(nano.spec.idle_board_w, abs=0.3)


def test_readings_are_deterministic_by_seed() -> None:
    def trace(seed: int) -> np.ndarray:
        dev = SimulatedDevice.from_name("jetson-tx2nx", seed=seed)
        for b in (16, 32, 32, 64):
            dev.account_step(RESNET18, b)
        return dev.power_readings_w(np.linspace(0, dev.now_s(), 300))

    assert np.array_equal(trace(7), trace(7))
    assert not np.array_equal(trace(7), trace(8))
    dev = SimulatedDevice.from_name("jetson-nano", seed=1)
    dev.account_step(SMALL, 32)
    assert dev.power_w() == dev.power_w() == dev.power_at_w(dev.now_s())


@pytest.mark.parametrize("workload", [SMALL, RESNET18], ids=["small-cnn", "resnet18"])
def test_an_evaluation_pass_is_a_cheap_forward_only_step(nano, workload: Workload) -> None:
    """A forward pass over b items costs less than the training step over them (a third
    of the FLOPs and traffic, no optimizer) but more than nothing; more items, more
    time; the clock does not move."""
    nano.set_freq_mhz(921.6)
    before = nano.now_s()
    for b in (8, 64, 256):
        step = nano.model_step(workload, b, 921.6).step_time_s
        one = nano.eval_time_s(workload, b, b)
        assert 0 < one < step
    assert nano.eval_time_s(workload, 1000, 256) > nano.eval_time_s(workload, 500, 256)
    # batches of 256: 1000 items are four forward steps, the last of 232 items
    four = 3 * nano.eval_time_s(workload, 256, 256) + nano.eval_time_s(workload, 232, 256)
    assert nano.eval_time_s(workload, 1000, 256) == pytest.approx(four, rel=1e-12)
    assert nano.now_s() == before
