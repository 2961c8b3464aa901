"""The power guard's window and judgement (train/session/guard.py), the end-of-run check, visible
frequency snaps, and a run over its limit counted as a failure in compare's tables."""

import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest

from undercap.devices.simulated import SimulatedDevice
from undercap.train.session.guard import EXCEEDED_AT_END, READ_ONLY, STEP_DOWN, PowerGuard

if TYPE_CHECKING:
    from undercap.artifacts.comparison import RunRecord


def nano(read_only: bool = False) -> SimulatedDevice:
    return SimulatedDevice.from_name("jetson-nano", read_only=read_only)


class SlowSensorNano(SimulatedDevice):
    def sensor_update_interval_s(self) -> float:
        return 1.0  # e.g. NVML's 1 s average


class Readings:
    """A sampler with readings every 10 ms from `power(t)`."""

    def __init__(self, power, now: float = 0.0) -> None:
        self.power, self.now = power, now

    def recent_readings(self, window_s: float):
        t = np.arange(max(0.0, self.now - window_s), self.now + 1e-9, 0.01)
        return t, np.array([self.power(x) for x in t])

    def window_mean_w(self, window_s: float) -> float:
        t, p = self.recent_readings(window_s)
        return float(p.mean())


def test_window_follows_the_sensor():
    assert PowerGuard(nano(), Readings(lambda t: 1.0), 5.0).window_s == pytest.approx(0.2)
    slow = SlowSensorNano(nano().spec)
    assert PowerGuard(slow, Readings(lambda t: 1.0), 5.0).window_s == pytest.approx(2.0)
    assert PowerGuard(nano(), Readings(lambda t: 1.0), 5.0, window_s=1.5).window_s == 1.5


def test_an_excess_in_mid_step_is_seen():
    """A 0.3 s burst over the limit inside a 4 s step: the last window at the step's
    end is fine, but the guard judges every window since its last check."""
    dev = nano()
    dev.set_freq_mhz(921.6)
    s = Readings(lambda t: 6.0 if 1.0 <= t < 1.3 else 4.0)
    g = PowerGuard(dev, s, 5.0, warn=False)
    s.now = 4.0
    assert s.window_mean_w(g.window_s) < 5.0  # what a last-window guard would see
    ev = g.check(4.0, 4.0, 128)
    assert ev is not None and ev.action == STEP_DOWN and ev.window_mean_w > 5.0
    assert ev.window_s == pytest.approx(0.2) and dev.current_freq_mhz() == 844.8
    s.now = 8.0
    assert g.check(8.0, 8.0, 256) is None  # the burst is not judged twice


def test_a_run_shorter_than_the_window_is_checked_at_its_end():
    dev = nano()
    s = Readings(lambda t: 5.5, now=0.05)
    g = PowerGuard(dev, s, 5.0, warn=False)
    assert g.check(0.05, 0.05, 32) is None  # less than a window: no decision yet
    notes = g.finish(0.05, 0.05, 32)
    assert [e.action for e in g.events] == [EXCEEDED_AT_END]
    assert any("exceeded" in n for n in notes) and g.exceeded_windows == 1
    ok = PowerGuard(nano(), Readings(lambda t: 4.0, now=0.05), 5.0, warn=False)
    assert ok.finish(0.05, 0.05, 32) == [] and ok.events == []
    ro = PowerGuard(nano(read_only=True), Readings(lambda t: 5.5, now=0.05), 5.0, warn=False)
    ro.finish(0.05, 0.05, 32)
    assert [e.action for e in ro.events] == [READ_ONLY]


def test_a_requested_clock_the_device_lacks_is_a_visible_snap(capsys):
    dev = nano()
    assert dev.set_freq_mhz(12345.0) == 921.6
    assert "no 12345 MHz step" in capsys.readouterr().err
    assert dev.last_snap == {"requested_mhz": 12345.0, "step_mhz": 921.6, "actual_mhz": 921.6}
    g = PowerGuard(dev, Readings(lambda t: 1.0), None)
    assert g.finish(1.0, 1.0, 1) == [
        "requested 12345 MHz, which sim:jetson-nano does not offer: ran at 921.6 MHz"
    ]
    dev.set_freq_mhz(614.4)
    assert dev.last_snap is None and capsys.readouterr().err == ""


def test_train_reports_the_snap_in_the_result(capsys):
    from undercap.data import load_dataset
    from undercap.train import train_on_device

    data = load_dataset("digits", input_shape=(1, 8, 8), limit=300)
    r = train_on_device(
        nano(), "small-cnn", data, batch_size=32, target_accuracy=1.0, freq_mhz=12345.0,
        max_samples=64, progress=False,
    )  # fmt: skip
    assert r.freq_mhz_requested == 12345.0 and r.freq_mhz_start == 921.6
    assert any("12345 MHz" in w for w in r.warnings)
    assert "no 12345 MHz step" in capsys.readouterr().err


def _run(method: str, seed: int, exceeded: bool, t: float = 10.0) -> "RunRecord":
    from undercap.artifacts.comparison import RunRecord

    return RunRecord(
        method, 5.0, seed, 32, 600.0, True, t, 20.0, 5.1 if exceeded else 4.8, 4.5, 1000,
        1000, 0.9, limit_exceeded=exceeded,
    )  # fmt: skip


@pytest.mark.skipif(sys.version_info < (3, 8), reason="compare's tables: the server's (3.8+)")
def test_a_run_over_its_limit_is_a_failure_in_the_tables():
    from undercap.artifacts.comparison import ChoiceRecord, Comparison, summarize
    from undercap.report.compare import markdown_report

    choices = tuple(ChoiceRecord(m, 5.0, 32, 600.0, 1e-3, 4.8, 1.0) for m in ("baseline1", "ours"))
    runs = (
        _run("baseline1", 0, False, 20.0),
        _run("baseline1", 1, False, 20.0),
        _run("ours", 0, False, 10.0),
        _run("ours", 1, True, 1.0),  # fast, but over the limit: must not count
    )
    c = Comparison("sim:jetson-nano", True, "m", "p", "t", 0.9, (5.0,), (0, 1), choices, runs)
    ours = next(s for s in summarize(c) if s.method == "ours")
    assert ours.n_over_limit == 1 and ours.time_mean_s == 10.0
    assert ours.speedup_vs_baseline1 == pytest.approx(2.0)
    md = markdown_report(c)
    assert "(1/2 over the limit)" in md and "FAILED in 1 of 2 seeds" in md
    assert Comparison.from_dict(c.to_dict()).runs[3].limit_exceeded
    all_over = Comparison(
        "sim:jetson-nano", True, "m", "p", "t", 0.9, (5.0,), (0,), choices[1:],
        (_run("ours", 0, True),),
    )  # fmt: skip
    assert "over the limit (1/1)" in markdown_report(all_over)


def test_the_clock_held_is_the_new_configurations_after_a_switch():
    """A guard step-down belongs to the configuration it happened in: after a changing
    cap's follower switches, the run holds the new clock."""
    from undercap.train.cap import FixedCap
    from undercap.train.session import Session
    from undercap.train.session.follow import Change, OperatingPoint
    from undercap.train.session.guard import GuardEvent

    cap = FixedCap(5.0)
    with Session(nano(), cap, freq_mhz=921.6, workload=None, batch_size=64) as session:
        session.guard.events.append(GuardEvent(0.1, 64, 921.6, 844.8, 5.2, 5.0, STEP_DOWN))
        assert session.locked_mhz() == 844.8
        session._follow(Change(4.0, OperatingPoint(32, 614.4, 3.9)))
        assert session.locked_mhz() == 614.4 and session.batch_size == 32
        session.guard.events.append(GuardEvent(0.2, 96, 614.4, 537.6, 4.1, 4.0, STEP_DOWN))
        assert session.locked_mhz() == 537.6
