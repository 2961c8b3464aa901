"""Fleet files, node configs, data splits and results records (torch-free parts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from undercap.errors import UndercapError
from undercap.fleet.partition import parse_partition, partition_indices
from undercap.fleet.records import FleetResult, NodeRound, RoundRecord, with_idle
from undercap.fleet.spec import FleetSpec, load_fleet, node_from_config

REPO = Path(__file__).resolve().parents[1]


def test_example_fleet_files_load() -> None:
    fleet = load_fleet(REPO / "examples" / "fleet-digits.toml")
    names = [n.name for n in fleet.nodes]
    assert names[:2] == ["jetson-nano-0", "jetson-nano-1"] and names[-1] == "nano-dim"
    assert {n.power_limit_w for n in fleet.nodes} == {3.1, 4.2, 5.8, 2.9}
    solar = load_fleet(REPO / "examples" / "fleet-resnet.toml").nodes[-1]
    assert solar.power_limit_w is None and Path(solar.power_schedule).name == "fleet-caps.csv"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[node]]\npower_limit_w = 3\n", "device"),
        ('[[node]]\ndevice = "sim:jetson-nano"\npower_limit_w = -1\n', "positive"),
        ('[[node]]\ndevice = "sim:jetson-nano"\ncount = 0\n', "count"),
        ('[[node]]\ndevice = "sim:jetson-nano"\ncap = 3\n', "unknown key"),
        ('[[node]]\ndevice = "jetson"\nread_only = "yes"\n', "read_only must be true or false"),
        ('[[node]]\ndevice = "x"\nname = "a"\n[[node]]\ndevice = "y"\nname = "a"\n', "repeat"),
        ("device = 3", "[[node]]"),
        ("[[node]\n", "not valid TOML"),
    ],
)
def test_bad_fleet_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(UndercapError, match=message.replace("[", r"\[")):
        load_fleet(path)


def test_node_config_of_a_real_supernode_wins_over_the_fleet_file() -> None:
    fleet = load_fleet(REPO / "examples" / "fleet-digits.toml")
    node, pid, n = node_from_config({"partition-id": 2, "num-partitions": 7}, fleet)
    assert (node.device, node.power_limit_w, pid, n) == ("sim:jetson-tx2nx", 4.2, 2, 7)
    cfg = {"device": "jetson", "power-limit-w": 5.0, "partition-id": 0, "num-partitions": 3}
    node, pid, n = node_from_config(cfg, fleet)
    assert (node.device, node.power_limit_w, pid, n) == ("jetson", 5.0, 0, 3)
    with pytest.raises(UndercapError, match="node-config"):
        node_from_config({"partition-id": 9}, fleet)
    assert not node.read_only  # a Jetson node locks its clocks unless it says otherwise
    node, _, _ = node_from_config({**cfg, "read-only": "true"}, fleet)
    assert node.read_only


def test_a_read_only_node_opens_its_device_read_only(tmp_path: Path) -> None:
    """read_only = true: the node trains at the clocks as found (a Jetson without
    root), and the fleet file round-trips it."""
    pytest.importorskip("flwr")
    from undercap.fleet.client_app import _open

    path = tmp_path / "fleet.toml"
    path.write_text('[[node]]\ndevice = "sim:jetson-nano"\npower_limit_w = 4\nread_only = true\n')
    fleet = load_fleet(path)
    (node,) = fleet.nodes
    assert node.read_only and FleetSpec.from_dict(fleet.to_dict()) == fleet
    with _open(node, seed=0) as device:
        assert device.read_only and not device.info().control_permitted


def label_counts(labels: np.ndarray, parts: list, num_classes: int) -> np.ndarray:
    """(nodes x classes) sample counts: how skewed the split is."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def test_iid_and_dirichlet_partitions() -> None:
    labels = np.repeat(np.arange(10), 50)
    iid = partition_indices(labels, 4, "iid", seed=0)
    assert sorted(np.concatenate(iid).tolist()) == list(range(500))
    assert [len(p) for p in iid] == [125, 125, 125, 125]
    skew = partition_indices(labels, 4, "dirichlet:0.1", seed=0)
    assert sorted(np.concatenate(skew).tolist()) == list(range(500))
    counts = label_counts(labels, skew, 10)
    assert (counts == 0).sum() > (label_counts(labels, iid, 10) == 0).sum()  # label skew
    assert partition_indices(labels, 4, "dirichlet:0.1", seed=0)[0].tolist() == skew[0].tolist()
    assert parse_partition("dirichlet:0.5") == ("dirichlet", 0.5)
    for bad in ("dirichlet:-1", "shards", "iid:2"):
        with pytest.raises(UndercapError, match="partition"):
            parse_partition(bad)
    with pytest.raises(UndercapError, match="cannot be split"):
        partition_indices(labels[:20], 4, "iid", seed=0)


def _node(name: str, t: float, e: float, exceeded: bool = False) -> NodeRound:
    return NodeRound(
        1, name, "sim:x", True, 4.0, 32, 100.0, 3, 96, 10.0, t, t, e, 3.9, 3.5, 2.0, exceeded, 0
    )


def test_idle_time_and_energy_and_round_trip() -> None:
    nodes, round_s = with_idle([_node("a", 1.0, 4.0), _node("b", 3.0, 9.0)])
    assert round_s == 3.0 and [n.idle_s for n in nodes] == [2.0, 0.0]
    assert nodes[0].idle_energy_j == 4.0  # 2 s at 2 W idle
    rec = RoundRecord(1, "balanced", round_s, 3.0, 0.95, 0.1, 2.0, nodes)
    assert rec.energy_j == 4.0 + 4.0 + 9.0
    res = FleetResult("balanced", 0.9, True, (rec,), {}, {"nodes": []}, True)
    assert res.rounds_to_target == 1 and res.time_to_target_s == 3.0 and res.cap_violations == 0
    again = FleetResult.from_dict(res.to_dict())
    assert again == res and again.to_dict()["schema"] == "undercap.fleet/1"


def test_missed_target_exits_3_with_how_close_it_came(capsys) -> None:
    from undercap.cli.common import training_exit_code

    nodes, round_s = with_idle([_node("a", 1.0, 4.0)])
    rec = RoundRecord(1, "balanced", round_s, 1.0, 0.85, 0.1, 2.0, nodes)
    missed = FleetResult("balanced", 0.9, False, (rec,), {}, {"nodes": []}, True)
    assert missed.outcome() == "target 90.0% not reached: best accuracy 85.00% in 1 rounds"
    assert training_exit_code(missed) == 3
    assert "not reached: best accuracy 85.00%" in capsys.readouterr().err
    hit = FleetResult("balanced", 0.8, True, (rec,), {}, {"nodes": []}, True)
    assert training_exit_code(hit) == 0 and hit.outcome().endswith("after 1 rounds")
