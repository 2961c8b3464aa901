"""Power caps that change during training: schedules, the progress model, re-selection
at every change, pauses through outages, and kill-and-resume mid-schedule."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from undercap.artifacts import Profile, ProfileRow
from undercap.errors import ArtifactError
from undercap.train.cap import LiveSource, PowerSchedule, load_schedule
from undercap.train.session.follow import OperatingPoint, Reselector, progress_fraction

REPO = Path(__file__).resolve().parents[1]


def test_schedule_csv(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("time_s,power_limit_w\n0,5\n10,0\n20,none\n30,4.5\n")
    s = load_schedule(p)
    assert [s.limit_at(t) for t in (0, 9.9, 10, 15, 20, 29, 30, 99)] == [
        5.0, 5.0, 0.0, 0.0, None, None, 4.5, 4.5,
    ]  # fmt: skip
    assert s.next_change_after(0) == 10 and s.next_change_after(25) == 30
    assert s.next_change_after(30) is None and s.lowest_w == 0.0
    assert load_schedule_text(tmp_path, s.to_csv()) == s.limits_w
    for bad, msg in [
        ("t,w\n0,1\n", "time_s,power_limit_w"),
        ("time_s,power_limit_w\n", "at least one row"),
        ("time_s,power_limit_w\n0,5\n0,4\n", "increase"),
        ("time_s,power_limit_w\n0,-1\n", ">= 0 W"),
        ("time_s,power_limit_w\n0,watts\n", "not a number"),
    ]:
        with pytest.raises(ArtifactError, match=msg):
            load_schedule_text(tmp_path, bad)


def load_schedule_text(tmp_path: Path, text: str):
    p = tmp_path / "x.csv"
    p.write_text(text)
    return load_schedule(p).limits_w


def test_live_source_reads_what_another_program_writes(tmp_path: Path) -> None:
    f = tmp_path / "cap"
    f.write_text("6.5\n")
    src = LiveSource(f, poll_s=10)
    assert src.limit_at(0) == 6.5
    f.write_text("3")
    assert src.limit_at(5) == 6.5  # not polled yet
    assert src.limit_at(10) == 3.0
    f.write_text("oops")  # a half-written update is not a cap: keep the last
    assert src.limit_at(20) == 3.0
    f.write_text("none")
    assert src.limit_at(30) is None


def test_progress_model_across_a_batch_size_switch() -> None:
    """p = sum s_b / N(b): 600 samples at b=16 (N=1200) is half the work, so b=64
    (N = 2400) still needs 1200 samples; the time-optimal choice at a new cap is
    Algorithm 1's there (the common factor 1 - p cancels)."""
    rel, n_max = {16: 0.5, 64: 1.0}, 2400
    p = progress_fraction({16: 600}, rel, n_max)
    assert p == pytest.approx(0.5)
    assert (1 - p) * rel[64] * n_max == pytest.approx(1200)  # still needed at b=64
    assert (1 - p) * rel[16] * n_max == pytest.approx(600)
    assert progress_fraction({16: 600, 64: 1200}, rel, n_max) == pytest.approx(1.0)


PROFILE = Profile(
    device={"name": "sim:x"},
    model="m",
    input_shape=(1,),
    rows=(
        ProfileRow(16, 500.0, 2.0e-3, 3.0, 2.8),
        ProfileRow(16, 900.0, 1.2e-3, 3.6, 3.4),
        ProfileRow(64, 500.0, 1.0e-3, 3.4, 3.2),
        ProfileRow(64, 900.0, 0.6e-3, 4.4, 4.2),
    ),
)


def test_reselector_follows_the_cap_and_pauses_when_nothing_fits() -> None:
    r = Reselector(PROFILE, {16: 0.5, 64: 1.0}, n_max=1000)
    assert r.choose(5.0).batch_size == 64 and r.choose(5.0).freq_mhz == 900.0
    assert (r.choose(3.3).batch_size, r.choose(3.3).freq_mhz) == (16, 500.0)
    assert r.choose(2.9) is None and r.choose(0.0) is None
    # An energy budget is what is left for the work that is left. Energy to the target
    # (J): b16@500 2.8, b16@900 2.04, b64@500 3.2, b64@900 2.52; at 90% done with
    # 2.78 J spent, 0.22 J is left for 10% of the work: only b16@900 (0.204 J) fits.
    budget = Reselector(PROFILE, {16: 0.5, 64: 1.0}, energy_budget_j=3.0, n_max=1000)
    full, late = budget.choose(5.0), budget.choose(5.0, p=0.9, energy_j=2.78)
    assert (full.batch_size, full.freq_mhz) == (64, 900.0)
    assert (late.batch_size, late.freq_mhz) == (16, 900.0)
    # nothing fits what is left: the least energy, rather than stopping
    spent = budget.choose(5.0, p=0.5, energy_j=2.99)
    assert (spent.batch_size, spent.freq_mhz) == (16, 900.0)


def _schedule_run(tmp_path: Path, extra: list[str]) -> list[str]:
    sched = tmp_path / "s.csv"
    sched.write_text("time_s,power_limit_w\n0,3.6\n0.08,0\n0.16,3.2\n0.3,none\n")
    return ["run", "--device", "sim:jetson-nano", "--model", "small-cnn", "--proxy", "digits",
            "--proxy-limit", "360", "--proxy-split-seed", "1", "--target", "digits",
            "--target-limit", "800", "--batch-sizes", "16..128", "--target-accuracy", "0.93",
            "--max-samples", "20000", "--eval-every", "128", "--estimate-seeds", "1",
            "--torch-device", "cpu", "--no-progress", "--power-schedule", str(sched),
            "--cache-dir", str(tmp_path / "cache"), *extra]  # fmt: skip


def test_run_follows_a_schedule_with_an_outage(tmp_path: Path, capsys) -> None:
    from undercap.cli import main

    out = tmp_path / "out"
    assert main(_schedule_run(tmp_path, ["-o", str(out)])) == 0, capsys.readouterr().err
    train = json.loads((out / "train.json").read_text())
    segs = train["segments"]
    assert train["reached"] and (out / "schedule.png").is_file()
    paused = [s for s in segs if s["batch_size"] is None]
    assert len(paused) == 1 and paused[0]["power_limit_w"] == 0 and paused[0]["samples"] == 0
    assert paused[0]["end_s"] == pytest.approx(0.16)
    assert train["pause_time_s"] == pytest.approx(paused[0]["end_s"] - paused[0]["start_s"])
    # every training segment stays within its own cap, and the configuration changes
    for s in segs:
        if s["batch_size"] is not None and s["power_limit_w"] is not None:
            assert s["peak_power_w"] <= s["power_limit_w"], s
    configs = {(s["batch_size"], s["freq_mhz"]) for s in segs if s["batch_size"]}
    assert len(configs) >= 2
    assert sum(s["samples"] for s in segs) == train["samples_trained"]
    assert train["time_to_accuracy_s"] == pytest.approx(
        train["train_time_s"] + train["pause_time_s"]
    )
    assert "paused" in (out / "summary.md").read_text()


def test_killed_mid_schedule_resumes_with_nothing_lost(tmp_path: Path, capsys) -> None:
    """SIGKILL during a scheduled run, after the outage (at a chosen step: the loop's
    test hook, whatever the machine's speed), then the same command: it resumes from
    the checkpoint and ends exactly as an uninterrupted run. --deterministic and one
    number of torch threads in every process make "exactly" hold on CUDA as on the CPU
    (resume_match.py)."""
    import torch

    from undercap.cli import main
    from undercap.train.checkpoint import load_checkpoint
    from undercap.train.loop.repro import KILL_AFTER_SAMPLES_ENV

    on_any = ["--torch-device", "auto", "--deterministic"]
    whole = tmp_path / "whole"
    assert main(_schedule_run(tmp_path, ["-o", str(whole), *on_any])) == 0
    ref = json.loads((whole / "train.json").read_text())
    sel = whole / "selection.json"
    base = ["train", "--from-selection", str(sel), "--power-schedule", str(tmp_path / "s.csv"),
            *on_any, "--no-progress", "--checkpoint-every-samples", "128",
            "--checkpoint-dir", str(tmp_path / "ckpt")]  # fmt: skip
    # b=64 until the outage at 256 samples, then b=64 and b=128 to the target at ~2500:
    # checkpoints at 256 and 384, killed at 448, so the step after 384 is lost and redone
    kill_at = 448
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS=str(torch.get_num_threads()),
               **{KILL_AFTER_SAMPLES_ENV: str(kill_at)})  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "undercap.cli", *base, "-o", str(tmp_path / "k.json")],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    at_kill = load_checkpoint(tmp_path / "ckpt")["trainer"]["samples"]
    assert 0 < at_kill <= kill_at < ref["samples_to_target"]
    out = tmp_path / "resumed.json"
    assert main([*base, "--resume", "-o", str(out)]) == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["resumed_from"] == at_kill
    for key in ("reached", "samples_to_target", "samples_trained", "curve"):
        assert res[key] == ref[key], key
    assert res["time_to_accuracy_s"] == pytest.approx(ref["time_to_accuracy_s"], rel=1e-6)
    strip = ("peak_power_w", "mean_power_w", "energy_j")  # sensor noise differs per process

    def same(segments: list[dict]) -> list[dict]:
        return [
            {k: round(v, 9) if isinstance(v, float) else v for k, v in s.items() if k not in strip}
            for s in segments
        ]

    assert same(res["segments"]) == same(ref["segments"])
    assert sum(s["energy_j"] for s in res["segments"]) == pytest.approx(res["energy_j"], rel=1e-6)


def test_repeating_schedule(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_text("time_s,power_limit_w\n0,0\n2,5\n8,0\n10,repeat\n")
    s = load_schedule(p)
    assert s.period_s == 10 and [s.limit_at(t) for t in (1, 2, 9, 12, 18.5)] == [0, 5, 0, 5, 0]
    assert [s.next_change_after(t) for t in (0, 5, 9, 12)] == [2, 8, 12, 18]
    assert load_schedule_text(tmp_path, s.to_csv()) == s.limits_w
    with pytest.raises(ArtifactError, match="repeat period"):
        load_schedule_text(tmp_path, "time_s,power_limit_w\n0,1\n5,2\n4,repeat\n")


def test_solar_schedule_from_irradiance(tmp_path: Path, capsys) -> None:
    """PV = G x area x efficiency x derate, minus the rest of the system; a battery
    carries the device through a cloud; time compressed into the training's span."""
    from undercap.cli import main
    from undercap.recipes.solar import SolarSystem, caps_w, solar_schedule

    rows = [(60.0 * i, g) for i, g in enumerate([-2, 0, 500, 1000, 100, 800, 0, -1])]
    system = SolarSystem(area_m2=0.05, efficiency=0.2, derate=1.0, rest_w=1.0)
    assert caps_w(rows, system) == [0, 0, 4.0, 9.0, 0, 7.0, 0, 0]
    # A 0.1 Wh battery at half charge, a 5 W device: the night's first minute drains it
    # (2 W to the device, 1 W to the rest); sun above 5 W refills it (x 0.9), and it
    # carries the device through the cloud at 2 W.
    battery = SolarSystem(area_m2=0.05, efficiency=0.2, derate=1.0, rest_w=1.0,
                          battery_wh=0.1, battery_w=2.0, initial_soc=0.5, reserve=0.0,
                          device_max_w=5.0)  # fmt: skip
    assert caps_w(rows, battery) == [2.0, 0, 4.0, 5.0, 2.0, 5.0, 2.0, 0.4]
    path = tmp_path / "ghi.csv"
    path.write_text("time_s,ghi_w_m2\n" + "".join(f"{t:g},{g}\n" for t, g in rows))
    sched, factor = solar_schedule(path, system, duration_s=5.0)
    # daylight: the 4 minutes from 120 s with G > 1 W/m^2, into 5 s: 48x
    assert factor == pytest.approx(240 / 5) and sched.times_s[0] == 0.0
    assert [sched.limit_at(t) for t in (0.0, 1.3, 2.6, 3.8)] == [4.0, 9.0, 0, 7.0]
    rep, _ = solar_schedule(path, system, duration_s=5.0, repeat=True)
    assert rep.period_s == pytest.approx(480 / 48) and rep.limit_at(rep.period_s + 1.3) == 9.0
    out = tmp_path / "s.csv"
    assert main(["solar", str(path), "--panel-area-m2", "0.05", "--derate", "1", "--rest-w",
                 "1", "--duration-s", "5", "-o", str(out)]) == 0  # fmt: skip
    assert load_schedule(out).limits_w == sched.limits_w
    assert "no power for" in capsys.readouterr().out


@pytest.mark.skipif(not (REPO.parent / "shared/data/power").is_dir(), reason="no shared data")
def test_solar_days_from_shared_data(tmp_path: Path) -> None:
    from undercap.recipes.solar import SolarSystem, solar_schedule

    for day in ("ghi-golden-co-2018-10-14-cloudy.csv", "ghi-alamosa-co-2016-01-01-clear.csv"):
        sched, _ = solar_schedule(REPO.parent / "shared/data/power" / day, SolarSystem(),
                                  duration_s=10, repeat=True)  # fmt: skip
        assert 0.0 in sched.limits_w and max(sched.limits_w) > 3.0 and sched.period_s > 10


class _Reselector:
    relative, n_max = {32: 0.5, 64: 1.0}, None

    def choose(self, limit, progress, energy_j):
        return OperatingPoint(64 if limit == 5.0 else 32, 900.0, limit or 0.0)

    def lowest_feasible_w(self):
        return 3.0


def test_resumed_after_switching_ahead_of_a_falling_cap_keeps_the_new_config():
    """A checkpoint taken after the follower switched ahead of a falling cap (5 W -> 3 W
    at 1.0 s, the next step would have crossed it): the resumed run goes on with the
    3 W configuration, as the uninterrupted run did, not one step re-selected for 5 W."""
    from undercap.train.session.follow import CapFollower

    schedule = PowerSchedule((0.0, 1.0), (5.0, 3.0))
    follower = CapFollower(schedule, _Reselector())
    changes = [follower.start(0.0, 0.0)]
    for t in (0.3, 0.6, 0.9):
        changes.append(follower.after_step(t, 0.3, 64, 0.0))
    made = [(c.point.batch_size, c.limit_w) for c in changes if c is not None]
    assert made == [(64, 5.0), (32, 3.0)]  # switched at 0.9 s, ahead of 1.0 s

    resumed = CapFollower(schedule, _Reselector(), follower.state())
    again = resumed.start(0.9, 0.0)
    assert (again.point.batch_size, again.limit_w, again.held) == (32, 3.0, True)
    assert resumed.after_step(1.2, 0.3, 32, 0.0) is None and resumed.limit_w == 3.0


def test_a_pause_waits_for_the_rise_and_says_so_once():
    """No configuration under 0 W: the follower says pause until the schedule's next
    rise (one waiting line), and after the wait the configuration the cap allows."""
    from undercap.train.session.follow import CapFollower

    schedule = PowerSchedule((0.0, 1.0, 5.0), (5.0, 0.0, 5.0))

    class _NoPower(_Reselector):
        def choose(self, limit, progress, energy_j):
            return None if not limit else super().choose(limit, progress, energy_j)

    follower = CapFollower(schedule, _NoPower())
    follower.start(0.0, 0.0)
    pause = follower.after_step(1.0, 0.3, 64, 0.0)
    assert pause.point is None and pause.wait_s == pytest.approx(4.0)
    assert "waiting for power" in pause.note and follower.config is None
    back = follower.after_wait(5.0, 0.0)
    assert back.point.batch_size == 64 and "power is back" in back.note


def test_cap_from_takes_a_made_schedule_or_live_source_as_it_is(tmp_path: Path) -> None:
    """capped(power_schedule=) and train_on_device(power_schedule=) hand a schedule or a
    live source already made: it is the cap; a limit beside it is one too many."""
    from undercap.errors import UndercapError
    from undercap.train.cap import FixedCap, LiveSource, cap_from

    (tmp_path / "cap.txt").write_text("4.2\n")
    live = LiveSource(tmp_path / "cap.txt", 1.0)
    assert cap_from(None, live) is live and live.limit_at(0.0) == 4.2
    assert cap_from(3.5) == FixedCap(3.5) and cap_from() == FixedCap(None)
    with pytest.raises(UndercapError, match="not several"):
        cap_from(3.5, live)
