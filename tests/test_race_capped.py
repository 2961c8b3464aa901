"""The race in your own loop: capped(race=True) and cap.race() (train/race_capped.py)
on the simulated Nano, with a scripted loop whose accuracy the test decides."""

from __future__ import annotations

import pytest
from select_helpers import make_profile

from undercap.artifacts.workload import Workload
from undercap.devices import open_device
from undercap.errors import UndercapError
from undercap.train.api import capped

WORK = Workload("resnet18", (3, 32, 32), 3.329e9, 4.70e6, 43.0e6, 11_173_962, 297)
# Nano clocks; b=32 is the faster per sample, so with r(16) = 0.5 or 0.9 the median picks 32
TABLE = {(16, 614.4): (0.7e-3, 2.5), (32, 768.0): (0.5e-3, 3.0)}
RELS = {"a": {16: 0.9, 32: 1.0}, "b": {16: 0.9, 32: 1.0}, "c": {16: 0.5, 32: 1.0}}


def _loop(cap, acc_of, every: int = 64) -> dict:  # type: ignore[no-untyped-def]
    """Train forks as a user's loop would: step, evaluate every `every` samples."""
    seen = {}
    for lane in cap.race():
        seen[lane.batch_size] = cap.freq_mhz
        n = 0
        while not lane.over:
            cap.step(cap.batch_size)
            n += cap.batch_size
            if n % every == 0 or lane.spent_s >= lane.budget_s:
                with cap.paused():
                    cap.report(acc_of(lane.batch_size, n))
    n = 0
    while not cap.done:  # the winner's fork continues (here: its curve goes on rising)
        cap.step(cap.batch_size)
        n += cap.batch_size
        if n % every == 0:
            with cap.paused():
                cap.report(0.5 + n / 10_000)
    return seen


def test_race_in_your_own_loop_picks_and_counts() -> None:
    profile = make_profile(TABLE, model="small-cnn")
    kw = {"profile": profile, "proxies": RELS, "power_limit_w": None, "workload": WORK,
          "target_accuracy": 0.9, "race": True, "samples_bmax": 2000, "race_budget": 0.2}  # fmt: skip
    with open_device("sim:jetson-nano") as device, capped(device, **kw) as cap:
        assert cap.batch_size == 32  # the favourite until the race says otherwise
        # b=16 learns faster on this "target": it wins the race
        seen = _loop(cap, lambda b, n: (0.3 if b == 32 else 0.4) + n / 100_000)
        assert cap.batch_size == 16 and cap.freq_mhz == 614.4
    assert seen == {32: 768.0, 16: 614.4}  # each lane at its own clock, locked
    res = cap.result()
    race = res.race
    assert [c["batch_size"] for c in race["plan"]["candidates"]] == [32, 16]
    assert race["winner"]["batch_size"] == 16 and len(race["lanes"]) == 2
    lanes = {x["batch_size"]: x for x in race["lanes"]}
    assert all(x["train_time_s"] >= race["plan"]["budget_s"] for x in lanes.values())
    assert race["cost_s"] == pytest.approx(lanes[32]["train_time_s"])
    # one session: the loser's time is in the totals and in the time to accuracy
    assert res.train_time_s > lanes[32]["train_time_s"] + lanes[16]["train_time_s"]
    assert res.reached and res.time_to_accuracy_s == pytest.approx(res.train_time_s)
    assert res.energy_j >= race["cost_j"] > 0
    assert res.curve and res.curve[0][1] >= 0.5  # the lanes' reports stay in their lanes


def test_reaching_the_target_in_a_lane_ends_the_race_and_training() -> None:
    profile = make_profile(TABLE, model="small-cnn")
    kw = {"profile": profile, "proxies": RELS, "power_limit_w": None, "workload": WORK,
          "target_accuracy": 0.9, "race": True, "samples_bmax": 2000, "race_budget": 0.2}  # fmt: skip
    with open_device("sim:jetson-nano") as device, capped(device, **kw) as cap:
        _loop(cap, lambda b, n: 0.95)
        assert cap.done
    race = cap.result().race
    assert len(race["lanes"]) == 1 and race["verdict"]["why"] == "reached the target"
    assert race["cost_s"] == 0 and cap.result().reached


def test_no_race_when_the_proxies_agree_and_bad_calls() -> None:
    profile = make_profile(TABLE, model="small-cnn")
    agree = {"a": RELS["a"], "b": RELS["b"]}
    with open_device("sim:jetson-nano") as device:
        with capped(device, profile=profile, proxies=agree, power_limit_w=None, workload=WORK,
                    target_accuracy=0.9, race=True, samples_bmax=2000) as cap:  # fmt: skip
            assert list(cap.race()) == []
            cap.step(32)
        assert cap.result().race is None
        with pytest.raises(UndercapError, match="samples_bmax"):
            capped(device, profile=profile, proxies=RELS, workload=WORK, race=True,
                   target_accuracy=0.9)  # fmt: skip
        with pytest.raises(UndercapError, match="target_accuracy"):
            capped(device, profile=profile, proxies=RELS, workload=WORK, race=True,
                   samples_bmax=10)  # fmt: skip
