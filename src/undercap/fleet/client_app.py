"""The Flower ClientApp: one per device (a SuperNode on a Jetson, or a virtual node in
Flower's simulation). `flwr run` loads `undercap.fleet.client_app:app`. Its query
profiles the model on the node's device (its own t(b, f), P(b, f); cached, so once per
node) and measures its idle power; its train runs the round the server planned for the
node under its own cap with the power guard (local.py) and replies with the updated
weights and what it measured (records.NodeRound's fields).

The node is described by its node config (spec.node_from_config); in simulation by the
fleet file's entry at its `partition-id`. The server sends the rest (model, data, seed).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Tuple

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from undercap.fleet.config import data_spec
from undercap.fleet.spec import FleetSpec, NodeSpec, node_from_config

_SCHEDULE_KEYS = ("times_s", "limits_w", "period_s")  # what a query reply says of a schedule
app = ClientApp()


def _node(msg: Message, context: Context) -> Tuple[Dict[str, Any], NodeSpec, int, Any]:
    """The run's setup, this node, its partition id and its training part (local.py)."""
    from undercap.fleet.local import node_splits

    setup = json.loads(str(msg.content["config"]["setup"]))
    fleet = FleetSpec.from_dict(setup["fleet"]) if setup.get("fleet") else None
    node, pid, n_parts = node_from_config(context.node_config, fleet)
    data, seed = data_spec(setup["data"]), int(setup["seed"])
    return setup, node, pid, node_splits(data, setup["partition"], pid, n_parts, seed)


def _open(node: NodeSpec, seed: int) -> Any:
    from undercap.devices import open_device

    return open_device(node.device, seed=seed, read_only=node.read_only)


def _profile(device: Any, setup: Dict[str, Any]) -> Any:
    """The node's profile of the run's model (local.py: cached, so once per node)."""
    from undercap.fleet.local import node_profile

    data, batch_sizes = data_spec(setup["data"]), tuple(setup["batch_sizes"])
    return node_profile(device, setup["model"], data, batch_sizes, setup.get("cache_dir"))


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Profile this node's device for the model; say its cap, schedule and data."""
    from undercap.fleet.local import idle_power_w, load_node_schedule

    setup, node, pid, splits = _node(msg, context)
    schedule = load_node_schedule(node.power_schedule)
    with _open(node, int(setup["seed"])) as device:
        profile = _profile(device, setup)
        idle_w = idle_power_w(device)
    info = {
        "node": node.to_dict(),
        "partition_id": pid,
        "num_examples": int(splits.n_train),
        "idle_power_w": idle_w,
        "profile": profile.to_dict(),
        "schedule": None if schedule is None else {k: getattr(schedule, k) for k in _SCHEDULE_KEYS},
    }
    return Message(RecordDict({"node": ConfigRecord({"info": json.dumps(info)})}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Run the planned local round under this node's cap; reply weights and measures."""
    from undercap.fleet.local import LocalTask, load_node_schedule, run_round
    from undercap.models.weights import initial_model

    setup, node, pid, splits = _node(msg, context)
    task = LocalTask.from_config(json.loads(str(msg.content["config"]["task"])))
    model, _ = initial_model(task.model, splits, init_seed=task.seed, pretrained=None)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    schedule = load_node_schedule(node.power_schedule)
    with _open(node, int(setup["seed"]) * 1000 + pid + 1) as device:  # its own sensor noise
        # re-selection at every change of a schedule needs the profile
        profile = None if schedule is None else _profile(device, setup)
        metrics = run_round(
            device,
            model,
            tuple(splits.input_shape),
            splits,
            task,
            schedule=schedule,
            profile=profile,
            relative={int(b): float(r) for b, r in setup.get("relative", {}).items()},
        )
        simulated = bool(device.is_simulated)
    info = {**metrics, "name": node.name, "device": node.device, "simulated": simulated}
    reply = {
        "arrays": ArrayRecord(model.state_dict()),
        "metrics": MetricRecord({"num-examples": int(splits.n_train)}),
        "node": ConfigRecord({"info": json.dumps(info)}),
    }
    return Message(RecordDict(reply), reply_to=msg)
