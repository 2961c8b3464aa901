"""A small fleet end to end on Flower: simulated Jetsons under their own caps (one left
out, one with a changing cap) train the small CNN on the digits to a global target,
every node's peak under its own cap every round. Needs the `fleet` extra."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("sklearn")

from undercap.cli import main  # noqa: E402
from undercap.data.spec import DataSpec  # noqa: E402
from undercap.fleet.config import FleetConfig  # noqa: E402
from undercap.fleet.spec import load_fleet  # noqa: E402

REL = {8: 0.33, 16: 0.37, 32: 0.44, 64: 0.67, 128: 1.0}  # r(b) of the digits (estimate)
FLEET = """
[[node]]
device = "sim:jetson-nano"
power_limit_w = 3.1
count = 2
[[node]]
device = "sim:jetson-tx2nx"
power_limit_w = 4.2
[[node]]
name = "orin-solar"
device = "sim:jetson-orin-nano"
power_schedule = "caps.csv"
[[node]]
name = "nano-dim"
device = "sim:jetson-nano"
power_limit_w = 2.9
"""


@pytest.fixture(scope="module")
def fleet_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fleet")
    (d / "caps.csv").write_text("time_s,power_limit_w\n0,5.8\n0.15,5.5\n")
    (d / "fleet.toml").write_text(FLEET)
    return d / "fleet.toml"


def _config(fleet_file: Path, tmp: Path, mode: str = "balanced") -> FleetConfig:
    return FleetConfig(
        fleet=load_fleet(fleet_file),
        model="small-cnn",
        data=DataSpec("digits"),
        target_accuracy=0.9,
        relative=REL,
        mode=mode,
        round_work=2 * 1437.0,
        max_rounds=25,
        cache_dir=str(tmp / "cache"),
    )


@pytest.fixture(scope="module")
def balanced_run(fleet_file: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from undercap.fleet.simulation import run_fleet

    out = tmp_path_factory.mktemp("out")
    return run_fleet(_config(fleet_file, out), out, backend="inprocess", progress=False), out


def test_fleet_reaches_the_target_under_every_node_cap(balanced_run) -> None:  # type: ignore[no-untyped-def]
    result, _ = balanced_run
    assert result.reached and result.simulated
    assert result.rounds[-1].accuracy >= 0.9 > (result.initial_accuracy or 0.0)
    for r in result.rounds:
        assert {n.name for n in r.nodes} == {
            "jetson-nano-0",
            "jetson-nano-1",
            "jetson-tx2nx",
            "orin-solar",
        }
        for n in r.nodes:
            assert not n.limit_exceeded and n.peak_power_w <= n.power_limit_w, (r.round, n)
            assert n.samples >= n.batch_size and n.energy_j > 0
        assert [e["name"] for e in r.excluded] == ["nano-dim"]
        assert "2.9 W" in r.excluded[0]["reason"]
    assert result.cap_violations == 0
    caps = [n.power_limit_w for r in result.rounds for n in r.nodes if n.name == "orin-solar"]
    assert caps[0] == 5.8 and caps[-1] == 5.5  # the schedule's drop, followed


def test_balanced_nodes_take_unequal_work_and_wait_little(balanced_run) -> None:  # type: ignore[no-untyped-def]
    result, _ = balanced_run
    first = {n.name: n for n in result.rounds[0].nodes}
    nano, tx2 = first["jetson-nano-0"], first["jetson-tx2nx"]
    assert nano.batch_size == 32 and tx2.batch_size == 64  # Algorithm 1 under each cap
    assert tx2.samples > nano.samples  # the faster node does more
    round_s = result.rounds[0].round_s
    assert all(n.idle_s <= 0.35 * round_s for n in first.values())  # whole-step rounding


def test_results_folder_loads(balanced_run) -> None:  # type: ignore[no-untyped-def]
    result, out = balanced_run
    doc = json.loads((out / "fleet.json").read_text())
    assert doc["schema"] == "undercap.fleet/1" and doc["reached"] and doc["cap_violations"] == 0
    rounds = list(csv.DictReader((out / "rounds.csv").open()))
    nodes = list(csv.DictReader((out / "nodes.csv").open()))
    assert len(rounds) == len(result.rounds) and len(nodes) == 4 * len(result.rounds)
    assert {"idle_s", "energy_j", "peak_power_w", "power_limit_w", "headroom_w"} <= set(nodes[0])
    assert "simulated" in (out / "summary.md").read_text()
    pd = pytest.importorskip("pandas")
    assert len(pd.read_csv(out / "nodes.csv")) == len(nodes)
    assert len(pd.read_json(out / "fleet.json", typ="series")["rounds"]) == len(rounds)


def test_equal_work_idles_more_than_balanced(
    fleet_file: Path, balanced_run, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from undercap.fleet.simulation import run_fleet

    balanced, _ = balanced_run
    cfg = _config(fleet_file, tmp_path, mode="equal")
    equal = run_fleet(cfg, None, backend="inprocess", progress=False)
    assert equal.cap_violations == 0
    idle = lambda res: sum(n.idle_s for n in res.rounds[0].nodes)  # noqa: E731
    assert idle(equal) > 2 * idle(balanced)


def test_cli_fleet_json_and_one_line_errors(fleet_file: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    eff = tmp_path / "eff.json"
    eff.write_text(
        json.dumps(
            {
                "schema": "undercap.efficiency/1",
                "model": "small-cnn",
                "dataset": "digits",
                "target_accuracy": 0.9,
                "samples_to_target": {str(b): [int(2300 * r)] for b, r in REL.items()},
                "relative": {str(b): r for b, r in REL.items()},
            }
        )
    )
    argv = ["fleet", "--fleet", str(fleet_file), "--efficiency", str(eff)]
    argv += ["--target-accuracy", "0.9", "--backend", "inprocess", "--no-progress"]
    argv += ["--round-samples", "2874", "--cache-dir", str(tmp_path / "cache"), "--json"]
    assert main(argv + ["-o", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reached"] and summary["cap_violations"] == 0 and summary["simulated"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[node]]\ndevice = "sim:jetson-nano"\npower_limit_w = "lots"\n')
    assert (
        main(
            [
                "fleet",
                "--fleet",
                str(bad),
                "--efficiency",
                str(eff),
                "--target-accuracy",
                "0.9",
                "-o",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: fleet file")
    assert main(argv[:-1] + ["--model", "resnet18", "-o", str(tmp_path / "y")]) == 2
    assert "not resnet18" in capsys.readouterr().err


@pytest.mark.slow
def test_the_same_apps_under_flowers_ray_simulation(
    fleet_file: Path, balanced_run, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Flower's simulation runtime (Ray actors as SuperNodes) gives the same run (the
    nodes' idle-power readings differ in sensor noise only)."""
    pytest.importorskip("ray")
    from undercap.fleet.simulation import run_fleet

    inproc, _ = balanced_run
    ray_res = run_fleet(_config(fleet_file, tmp_path), None, backend="ray", progress=False)
    a, b = ray_res.summary(), inproc.summary()
    assert a.pop("energy_to_target_j") == pytest.approx(b.pop("energy_to_target_j"), rel=1e-3)
    assert a == b
