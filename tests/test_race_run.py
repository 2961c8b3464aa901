"""The race on the device (`undercap run --race`: recipes/race.py, train/race.py): the
lanes train under the cap through run's own training path, the winner continues from
its fork, the losers' time and energy are counted, train.json records it all."""

from __future__ import annotations

import json

import pytest
from select_helpers import make_efficiency

from undercap.artifacts import save_efficiency
from undercap.artifacts.train_result import load_train_result
from undercap.cli import main
from undercap.select.race import RacePlan, Verdict
from undercap.train.race import Lane, RaceRecord, decide, with_race

QUICK = [
    "--device", "sim:jetson-nano", "--model", "small-cnn", "--batch-sizes", "16,64",
    "--max-samples", "3000", "--eval-every", "128", "--torch-device", "cpu", "--no-progress",
    "--target", "digits", "--target-limit", "600", "--target-accuracy", "0.7",
    "--power-limit", "3.5",
]  # fmt: skip


def _effs(tmp_path, rels):  # type: ignore[no-untyped-def]
    paths = []
    for i, rel in enumerate(rels):
        paths += ["--efficiency", str(save_efficiency(tmp_path / f"e{i}.json",
                                                      make_efficiency(rel, model="small-cnn",
                                                                      n_max=4000)))]  # fmt: skip
    return paths


# Two proxies say b=64 (r(16) = 3: small batches need 3x the samples), one says b=16: the
# median picks b=64 and the race is b=64 against b=16.
DISAGREE = [{16: 3.0, 64: 1.0}, {16: 3.0, 64: 1.0}, {16: 0.1, 64: 1.0}]


def test_run_races_the_candidates_and_counts_the_cost(tmp_path, capsys) -> None:
    out = tmp_path / "r"
    argv = ["run", *QUICK, *_effs(tmp_path, DISAGREE), "--race", "--race-budget", "0.1"]
    assert main([*argv, "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "race: racing b=64" in err and "race: b=64" in err and "race: winner b=" in err
    train = json.loads((out / "train.json").read_text())
    race = train["race"]
    assert [c["batch_size"] for c in race["plan"]["candidates"]] == [64, 16]
    lanes = race["lanes"]
    # neither reaches 0.7 in 0.1 of the predicted time: both run, each judged on the target
    assert len(lanes) == 2 and all(lane["curve"] and not lane["reached"] for lane in lanes)
    for lane in lanes:  # it ran its budget, judged by an evaluation at its end
        assert lane["train_time_s"] >= race["plan"]["budget_s"]
        assert lane["curve"][-1]["samples"] == lane["samples"]
    # the cap held in every lane, as in training
    assert all(lane["peak_power_w"] <= 3.5 and not lane["limit_exceeded"] for lane in lanes)
    w = race["verdict"]["index"]
    losers = [lane for i, lane in enumerate(lanes) if i != w]
    assert race["cost_s"] == pytest.approx(sum(x["train_time_s"] for x in losers))
    assert race["cost_j"] == pytest.approx(sum(x["energy_j"] for x in losers))
    assert (train["batch_size"], race["winner"]["batch_size"]) == (lanes[w]["batch_size"],) * 2
    assert train["reached"]
    # the winner continued from its fork: the training resumed from the lane's samples
    assert train["resumed_from"] == lanes[w]["samples"] and race["cost_s"] > 0
    assert train["train_time_s"] >= lanes[w]["train_time_s"] + race["cost_s"] - 1e-9
    assert train["time_to_accuracy_s"] <= train["train_time_s"] + 1e-9
    assert (out / "race" / "race.json").exists()
    assert "race on the target" in (out / "summary.md").read_text()
    again = load_train_result(out / "train.json")  # round-trips through the artifact
    assert again.race == train["race"]
    # `undercap train --race` from the run's selection: the same race, the same winner
    t = tmp_path / "t.json"
    argv = ["train", "--device", "sim:jetson-nano", "--from-selection", str(out / "selection.json"),
            "--race", "--race-budget", "0.1", "--checkpoint-dir", str(tmp_path / "ck"),
            "--no-progress", "--torch-device", "cpu", "-o", str(t)]  # fmt: skip
    assert main(argv) == 0
    assert "race on the target" in capsys.readouterr().out
    trained = json.loads(t.read_text())
    curves = [(x["batch_size"], x["curve"], x["train_time_s"]) for x in race["lanes"]]
    assert [
        (x["batch_size"], x["curve"], x["train_time_s"]) for x in trained["race"]["lanes"]
    ] == curves
    assert trained["race"]["winner"] == race["winner"] and trained["reached"]
    assert trained["time_to_accuracy_s"] == pytest.approx(train["time_to_accuracy_s"])


def test_run_says_why_there_is_no_race(tmp_path, capsys) -> None:
    effs = _effs(tmp_path, DISAGREE)
    assert main(["run", *QUICK, *effs, "--max-samples", "600", "-o", str(tmp_path / "a")]) in (0, 3)
    assert "race: off (the default" in capsys.readouterr().err
    agree = _effs(tmp_path, DISAGREE[:2] + [DISAGREE[0]])
    argv = ["run", *QUICK, *agree, "--race", "--max-samples", "600", "-o", str(tmp_path / "b")]
    assert main(argv) in (0, 3)
    assert "race: skipped (one candidate" in capsys.readouterr().err
    assert "race" not in json.loads((tmp_path / "b" / "train.json").read_text()) or (
        json.loads((tmp_path / "b" / "train.json").read_text())["race"] is None
    )


def test_bad_race_budget_is_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", *QUICK, "--efficiency", "x.json", "--race-budget", "2", "-o", "x"])
    assert e.value.code == 2 and "--race-budget" in capsys.readouterr().err


def _lane(b: int, t: float, acc: float, reached: bool = False) -> Lane:
    return Lane(b, 500.0, ((t, 100, acc),), t, 2 * t, 100, reached, 3.0, False)


def test_decide_and_with_race_count_the_losers() -> None:
    plan = RacePlan((), 1.0, 10.0, 0.1, 0.0)
    rec = decide(plan, [_lane(64, 1.0, 0.5), _lane(16, 1.0, 0.6)], 0.9)
    assert rec.winner["batch_size"] == 16 and rec.verdict["index"] == 1
    assert (rec.cost_s, rec.cost_j) == (1.0, 2.0)
    assert RaceRecord.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec
    v = Verdict(0, None, (0.5,), "x")
    assert v.to_dict()["index"] == 0

    from dataclasses import replace

    from undercap.artifacts.train_result import TrainResult

    base = {f: None for f in TrainResult.__dataclass_fields__}
    res = TrainResult(**{**base, "reached": True, "time_to_accuracy_s": 5.0, "train_time_s": 6.0,
                         "energy_j": 12.0, "peak_power_w": 3.1, "limit_exceeded": False,
                         "pause_time_s": 0.0, "power_limit_w": 3.5, "guard_events": (),
                         "curve": (), "segments": (), "warnings": (), "config": {},
                         "provenance": {}})  # fmt: skip
    got = with_race(res, rec)
    assert (got.time_to_accuracy_s, got.train_time_s, got.energy_j) == (6.0, 7.0, 14.0)
    assert got.race == rec.to_dict() and got.mean_power_w == pytest.approx(2.0)
    missed = with_race(replace(res, reached=False, time_to_accuracy_s=None), rec)
    assert missed.time_to_accuracy_s is None and missed.train_time_s == 7.0
