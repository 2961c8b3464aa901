"""What a fleet run measured: per node per round, per round, and the whole run.
Frozen dataclasses that round-trip through JSON (schema undercap.fleet/1); torch-free.

Times are device clocks (virtual on simulated devices). A round lasts as long as its
slowest node (the nodes train in parallel; transfers and the server's evaluation are
not counted). A node that finishes early waits idle for the rest of the round at its
measured idle power: that wait is its `idle_s`, its energy `idle_energy_j`, and the
fleet's energy to the target includes it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from undercap.artifacts.io import from_fields

FLEET_SCHEMA = "undercap.fleet/1"


@dataclass(frozen=True)
class NodeRound:
    """One node's local round, as its reply reported it, plus its wait."""

    round: int
    name: str
    device: str
    simulated: bool
    power_limit_w: Optional[float]
    batch_size: int
    freq_mhz: Optional[float]
    local_steps: int
    samples: int
    weight: float  # its training examples (its data share)
    predicted_time_s: float  # the plan's
    device_time_s: float  # training plus any wait for power (a changing cap)
    energy_j: float
    peak_power_w: float
    mean_power_w: float
    idle_power_w: float
    limit_exceeded: bool
    guard_events: int
    idle_s: float = 0.0
    idle_energy_j: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RoundRecord:
    round: int
    mode: str
    round_s: float  # the slowest node's device time
    fleet_time_s: float  # at the end of this round
    accuracy: float  # of the global model after aggregation
    loss: float
    effective_steps: float  # FedNova's tau_eff
    nodes: Tuple[NodeRound, ...]
    excluded: Tuple[Dict[str, Any], ...] = ()

    @property
    def energy_j(self) -> float:
        """Training plus waiting, over the fleet's nodes in this round."""
        return sum(n.energy_j + n.idle_energy_j for n in self.nodes)

    def to_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "energy_j": self.energy_j}


def with_idle(nodes: List[NodeRound]) -> Tuple[Tuple[NodeRound, ...], float]:
    """The nodes with their wait for the slowest filled in, and the round's length."""
    round_s = max((n.device_time_s for n in nodes), default=0.0)
    idle = [max(0.0, round_s - n.device_time_s) for n in nodes]
    out = tuple(replace(n, idle_s=i, idle_energy_j=i * n.idle_power_w) for n, i in zip(nodes, idle))
    return out, round_s


@dataclass(frozen=True)
class FleetResult:
    """A fleet run to a global target accuracy (or to its round budget)."""

    mode: str
    target_accuracy: float
    reached: bool
    rounds: Tuple[RoundRecord, ...]
    config: Dict[str, Any]
    fleet: Dict[str, Any]  # spec.FleetSpec.to_dict()
    simulated: bool
    provenance: Dict[str, Any] = field(default_factory=dict)
    initial_accuracy: Optional[float] = None

    @property
    def rounds_to_target(self) -> Optional[int]:
        return next((r.round for r in self.rounds if r.accuracy >= self.target_accuracy), None)

    def _upto(self) -> Tuple[RoundRecord, ...]:
        n = self.rounds_to_target
        return self.rounds if n is None else tuple(r for r in self.rounds if r.round <= n)

    @property
    def time_to_target_s(self) -> Optional[float]:
        return self._upto()[-1].fleet_time_s if self.reached and self.rounds else None

    @property
    def energy_to_target_j(self) -> Optional[float]:
        return sum(r.energy_j for r in self._upto()) if self.reached else None

    @property
    def idle_s_per_round(self) -> float:
        """Mean over rounds of the nodes' summed wait for the slowest."""
        rs = self._upto()
        return sum(sum(n.idle_s for n in r.nodes) for r in rs) / len(rs) if rs else 0.0

    def outcome(self) -> str:
        """One line, as TrainResult.outcome: reached, or how close the global model came."""
        if self.reached:
            return f"target {self.target_accuracy:.1%} reached after {self.rounds_to_target} rounds"
        best = max([r.accuracy for r in self.rounds] + [self.initial_accuracy or 0.0])
        return (
            f"target {self.target_accuracy:.1%} not reached: best accuracy {best:.2%} "
            f"in {len(self.rounds)} rounds"
        )

    @property
    def cap_violations(self) -> int:
        """Node rounds whose robust peak went above the node's own cap."""
        return sum(n.limit_exceeded for r in self.rounds for n in r.nodes)

    def summary(self) -> Dict[str, Any]:
        return {
            "mode": self.mode,
            "reached": self.reached,
            "rounds_to_target": self.rounds_to_target,
            "time_to_target_s": self.time_to_target_s,
            "energy_to_target_j": self.energy_to_target_j,
            "idle_s_per_round": self.idle_s_per_round,
            "cap_violations": self.cap_violations,
            "final_accuracy": self.rounds[-1].accuracy if self.rounds else None,
            "simulated": self.simulated,
        }

    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema": FLEET_SCHEMA,
            **self.summary(),
            "target_accuracy": self.target_accuracy,
            "initial_accuracy": self.initial_accuracy,
            "config": self.config,
            "fleet": self.fleet,
            "rounds": [r.to_dict() for r in self.rounds],
            "provenance": self.provenance,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FleetResult:
        return from_fields(cls, d)
