"""The Flower strategy of a power-capped fleet: per-node configuration every round,
work balanced across heterogeneous caps (plan.py), unbiased aggregation of unequal
local work (aggregate.py: FedNova), and a stop at the global target accuracy.

A FedAvg subclass, so the same ServerApp runs in Flower's simulation and against a
SuperLink with real SuperNodes. Before round 1 it asks every node (a QUERY message) for
its profile, cap, schedule, idle power and data size; every round it plans at each
node's cap now (its schedule at the round's start on the fleet clock), sends a TRAIN
message with its own task to every planned node, and aggregates the replies (FedNova).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from undercap.artifacts.io import from_fields
from undercap.artifacts.profile import Profile
from undercap.errors import UndercapError
from undercap.fleet.aggregate import NodeUpdate, effective_steps, fednova
from undercap.fleet.config import FleetConfig, setup_json
from undercap.fleet.plan import NodeFacts, RoundPlan, plan_round
from undercap.fleet.records import NodeRound, RoundRecord, with_idle
from undercap.fleet.spec import NodeSpec
from undercap.train.cap import PowerSchedule

EvalFn = Callable[[ArrayRecord], Tuple[float, float]]  # (accuracy, loss)


class NodeInfo:
    """What a node told the server in its QUERY reply."""

    def __init__(self, node_id: int, info: Dict[str, Any]) -> None:
        self.node_id = node_id
        self.spec = NodeSpec(**info["node"])
        self.name = self.spec.name
        self.profile = Profile.from_dict(info["profile"])
        self.weight = float(info["num_examples"])
        self.idle_power_w = float(info["idle_power_w"])
        self.partition_id = int(info["partition_id"])
        s = info.get("schedule")
        self.schedule = None
        if s:
            self.schedule = PowerSchedule(
                tuple(s["times_s"]), tuple(s["limits_w"]), self.name, s.get("period_s")
            )

    def cap_at(self, fleet_time_s: float) -> Optional[float]:
        if self.schedule is None:
            return self.spec.power_limit_w
        return self.schedule.limit_at(fleet_time_s)


class PowerCapStrategy(FedAvg):
    """See the module docstring. `trainable[k]`: whether the k-th array of the model's
    state is a parameter (FedNova-normalised) or a statistic (averaged)."""

    def __init__(
        self,
        cfg: FleetConfig,
        trainable: List[bool],
        *,
        round_work: float,
        on_round: Optional[Callable[[RoundRecord, RoundPlan], None]] = None,
    ) -> None:
        n = len(cfg.fleet.nodes)
        super().__init__(min_train_nodes=n, min_available_nodes=n, min_evaluate_nodes=0)
        self.fraction_evaluate = 0.0  # the server evaluates the global model itself
        self.cfg, self.trainable, self.round_work = cfg, list(trainable), float(round_work)
        self.on_round = on_round
        self.nodes: Dict[int, NodeInfo] = {}
        self.fleet_time_s = 0.0
        self.rounds: List[RoundRecord] = []
        self._plan: Optional[RoundPlan] = None
        self._keys: List[str] = []
        self._global: List[np.ndarray] = []

    # --- before round 1 --------------------------------------------------------------
    def query_nodes(self, grid: Grid, timeout: float) -> Dict[int, NodeInfo]:
        """Every node's profile, cap, schedule, idle power and data size."""
        config = ConfigRecord({"setup": setup_json(self.cfg)})
        messages = [
            Message(RecordDict({"config": config}), dst_node_id=nid, message_type=MessageType.QUERY)
            for nid in grid.get_node_ids()
        ]
        for reply in grid.send_and_receive(messages, timeout=timeout):
            _raise_on_error(reply, "profiling")
            info = json.loads(str(reply.content["node"]["info"]))
            self.nodes[reply.metadata.src_node_id] = NodeInfo(reply.metadata.src_node_id, info)
        if len(self.nodes) < len(messages):
            raise UndercapError(f"only {len(self.nodes)} of {len(messages)} nodes answered")
        names = [n.name for n in self.nodes.values()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:  # the plan and the records know nodes by name
            raise UndercapError(
                f"node names repeat: {', '.join(dup)}; give every SuperNode its own "
                "name='...' (or partition-id) in its --node-config"
            )
        return self.nodes

    def node_specs(self) -> Tuple[NodeSpec, ...]:
        """The nodes as they described themselves, in partition order."""
        return tuple(n.spec for n in self._ordered())

    def _ordered(self) -> List[NodeInfo]:
        return sorted(self.nodes.values(), key=_order_key)

    # --- every round -----------------------------------------------------------------
    def plan(self) -> RoundPlan:
        """This round's plan at every node's cap now (plan.py)."""
        facts = [NodeFacts(n.name, n.profile, n.cap_at(self.fleet_time_s)) for n in self._ordered()]
        return plan_round(
            facts, self.cfg.relative, self.cfg.mode, self.round_work, margin_w=self.cfg.margin_w
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One message per planned node with its own task."""
        self._plan = self.plan()
        self._keys = list(arrays.keys())
        self._global = [arrays[k].numpy() for k in self._keys]
        setup = setup_json(self.cfg)
        out = []
        for info in self._ordered():
            p = self._plan.node(info.name)
            if p is None:
                continue  # left out this round (plan.Excluded says why)
            task = self._task(p, server_round)
            cfg = ConfigRecord({"setup": setup, "task": json.dumps(task)})
            content = RecordDict({"arrays": arrays, "config": cfg})
            out.append(Message(content, dst_node_id=info.node_id, message_type=MessageType.TRAIN))
        return out

    def _task(self, p: Any, server_round: int) -> Dict[str, Any]:
        return {
            "model": self.cfg.model,
            "batch_size": p.batch_size,
            "freq_mhz": p.freq_mhz,
            "power_limit_w": p.power_limit_w if p.power_limit_w is not None else 0.0,
            "local_samples": p.local_samples,
            "base_lr": self.cfg.base_lr if self.cfg.base_lr is not None else _model_lr(self.cfg),
            "max_batch_size": max(self.cfg.relative),
            "optimizer": self.cfg.optimizer,
            "momentum": self.cfg.momentum,
            "seed": self.cfg.seed,
            "round": server_round,
            "fleet_time_s": self.fleet_time_s,
        }

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> Tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """FedNova over the replies; the round's per-node records."""
        replies = list(replies)
        for r in replies:
            _raise_on_error(r, f"round {server_round}")
        # a SuperLink returns replies as they come: aggregate and record in node order
        replies.sort(key=lambda r: _order_key(self.nodes[r.metadata.src_node_id]))
        updates, node_rounds = [], []
        for r in replies:
            info = self.nodes[r.metadata.src_node_id]
            arrays = [r.content["arrays"][k].numpy() for k in self._keys]
            measured = json.loads(str(r.content["node"]["info"]))
            updates.append(NodeUpdate(arrays, int(measured["local_steps"]), info.weight))
            node_rounds.append(self._node_round(server_round, info, measured))
        new = fednova(self._global, updates, trainable=self.trainable, momentum=self.cfg.momentum)
        self._pending = (node_rounds, effective_steps(updates, self.cfg.momentum))
        record = ArrayRecord({k: _array(a) for k, a in zip(self._keys, new)})
        return record, MetricRecord({"effective-steps": self._pending[1]})

    def _node_round(self, server_round: int, info: NodeInfo, m: Dict[str, Any]) -> NodeRound:
        planned = self._plan.node(info.name) if self._plan else None
        known = {
            "round": server_round,
            "name": info.name,
            "device": info.spec.device,
            "power_limit_w": info.cap_at(self.fleet_time_s),
            "weight": info.weight,
            "predicted_time_s": planned.predicted_time_s if planned else 0.0,
            "idle_power_w": info.idle_power_w,
        }
        return from_fields(NodeRound, {**m, **known})  # m: local.run_round's and `simulated`

    def close_round(self, server_round: int, accuracy: float, loss: float) -> RoundRecord:
        """The round's record once the global model is evaluated; the fleet clock on."""
        node_rounds, tau_eff = self._pending
        nodes, round_s = with_idle(node_rounds)
        self.fleet_time_s += round_s
        assert self._plan is not None
        record = RoundRecord(
            round=server_round,
            mode=self.cfg.mode,
            round_s=round_s,
            fleet_time_s=self.fleet_time_s,
            accuracy=float(accuracy),
            loss=float(loss),
            effective_steps=tau_eff,
            nodes=nodes,
            excluded=tuple(e.to_dict() for e in self._plan.excluded),
        )
        self.rounds.append(record)
        if self.on_round is not None:
            self.on_round(record, self._plan)
        return record

    # --- the run ---------------------------------------------------------------------
    def start(  # type: ignore[override]
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: Optional[ConfigRecord] = None,
        evaluate_config: Optional[ConfigRecord] = None,
        evaluate_fn: Optional[EvalFn] = None,
    ) -> Result:
        """Flower's round loop (Strategy.start), stopping once the global model reaches
        the target: query the nodes, then train, aggregate, evaluate every round."""
        if evaluate_fn is None:
            raise UndercapError("the fleet strategy needs the server's evaluation")
        self.query_nodes(grid, timeout)
        result, arrays = Result(), initial_arrays
        for rnd in range(1, num_rounds + 1):
            messages = self.configure_train(rnd, arrays, train_config or ConfigRecord(), grid)
            replies = grid.send_and_receive(messages=messages, timeout=timeout)
            agg, metrics = self.aggregate_train(rnd, replies)
            arrays = result.arrays = agg if agg is not None else arrays
            acc, loss = evaluate_fn(arrays)
            result.evaluate_metrics_serverapp[rnd] = MetricRecord({"accuracy": acc, "loss": loss})
            if metrics is not None:
                result.train_metrics_clientapp[rnd] = metrics
            self.close_round(rnd, acc, loss)
            if acc >= self.cfg.target_accuracy:
                break
        return result


def _order_key(n: NodeInfo) -> Tuple[int, str, int]:
    return (n.partition_id, n.name, n.node_id)


def _raise_on_error(reply: Message, what: str) -> None:
    if reply.has_error():
        raise UndercapError(
            f"node {reply.metadata.src_node_id} failed during {what}: {reply.error.reason}"
        )


def _array(a: np.ndarray) -> Any:
    from flwr.app import Array

    return Array.from_numpy_ndarray(np.array(a, order="C"))  # keeps 0-d arrays 0-d


def _model_lr(cfg: FleetConfig) -> float:
    from undercap.models.registry import model_spec

    return float(model_spec(cfg.model).base_lr)
