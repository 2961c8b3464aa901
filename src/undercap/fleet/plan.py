"""What each node does in a round: its (b, f) under its own cap and its local work.
Pure functions of the nodes' profiles, caps and r(b); no torch, no Flower.

A round lasts as long as its slowest node (synchronous federated learning), so a
node that finishes early idles. Three plans, the benchmark's (a), (b), (c):

* "baseline1": every node at the paper's Baseline 1 (its largest batch at its safe
  clock, select/baselines.py) with equal local work;
* "equal": every node at its own Algorithm 1 choice (select_ours under its cap) with
  equal local work;
* "balanced" (undercap's): the same choices, with local work that makes the nodes
  finish together.

Work is counted in b_max-equivalent samples: a sample trained at batch size b does
1 / r(b) of the progress of one at b_max (r(b) = N(b) / N(b_max), paper Sec. 4.2;
the same progress model as train/cap.py), so every plan of a round does the
same progress W (`round_work`):

* equal work: node i trains n_i = r(b_i) * W / N samples;
* balanced: node i trains for the same time T at t_i = t(b_i, f_i) seconds per
  sample, n_i = T / t_i, with sum_i n_i / r(b_i) = W, so T = W / sum_i 1 / (t_i r_i).

n_i is rounded to whole steps of b_i (at least one). A node whose cap no
configuration of the model meets is left out of the round, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from undercap.artifacts.profile import Profile
from undercap.errors import InfeasibleError, UndercapError
from undercap.select import baseline1, lowest_feasible_power_w, safe_freq_mhz, select_ours

BALANCED, EQUAL, BASELINE1 = "balanced", "equal", "baseline1"
MODES = (BALANCED, EQUAL, BASELINE1)


@dataclass(frozen=True)
class NodeFacts:
    """What the server knows of a node when it plans: its profile and its cap now."""

    name: str
    profile: Profile
    power_limit_w: Optional[float]


@dataclass(frozen=True)
class NodePlan:
    """One node's round: the configuration, its local work and the predicted time."""

    name: str
    method: str  # "ours" or "baseline1" (select/core.py)
    batch_size: int
    freq_mhz: float
    power_limit_w: Optional[float]
    peak_power_w: float  # the profile's at (b, f)
    time_per_sample_s: float  # the profile's t(b, f)
    relative_samples: float  # r(b)
    local_steps: int
    local_samples: int
    predicted_time_s: float

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Excluded:
    name: str
    power_limit_w: Optional[float]
    lowest_feasible_w: Optional[float]
    reason: str

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RoundPlan:
    mode: str
    round_work: float  # b_max-equivalent samples the fleet trains this round
    nodes: Tuple[NodePlan, ...]
    excluded: Tuple[Excluded, ...]

    @property
    def predicted_round_s(self) -> float:
        return max((n.predicted_time_s for n in self.nodes), default=0.0)

    def node(self, name: str) -> Optional[NodePlan]:
        return next((n for n in self.nodes if n.name == name), None)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "mode": self.mode,
            "round_work": self.round_work,
            "predicted_round_s": self.predicted_round_s,
            "nodes": [n.to_dict() for n in self.nodes],
            "excluded": [e.to_dict() for e in self.excluded],
        }


def choose_node(
    node: NodeFacts, relative: Mapping[int, float], mode: str, margin_w: Optional[float] = None
) -> Any:  # select.core.Choice
    """The node's configuration under its own cap: Algorithm 1, or Baseline 1 at the
    node's safe clock (the highest at which no profiled batch size exceeds the cap)."""
    if mode == BASELINE1:
        f_safe = safe_freq_mhz(node.profile, node.power_limit_w, margin_w=margin_w)
        return baseline1(
            node.profile, node.power_limit_w, f_safe, relative=relative, margin_w=margin_w
        )
    return select_ours(node.profile, relative, node.power_limit_w, margin_w=margin_w)


def split_work(
    times_per_sample_s: Sequence[float],
    relative: Sequence[float],
    batch_sizes: Sequence[int],
    round_work: float,
    balanced: bool,
) -> Tuple[int, ...]:
    """Local steps per node for `round_work` b_max-equivalent samples in all (module
    docstring): equal progress per node, or equal time (balanced)."""
    if not times_per_sample_s:
        return ()
    if round_work <= 0 or not math.isfinite(round_work):
        raise UndercapError(f"round work must be a positive number of samples, got {round_work}")
    if balanced:
        speed = sum(1.0 / (t * r) for t, r in zip(times_per_sample_s, relative))
        duration_s = round_work / speed
        samples = [duration_s / t for t in times_per_sample_s]
    else:
        samples = [r * round_work / len(times_per_sample_s) for r in relative]
    return tuple(max(1, int(round(s / b))) for s, b in zip(samples, batch_sizes))


def plan_round(
    nodes: Sequence[NodeFacts],
    relative: Mapping[int, float],
    mode: str,
    round_work: float,
    *,
    margin_w: Optional[float] = None,
) -> RoundPlan:
    """Every node's configuration and local work for one round (module docstring)."""
    if mode not in MODES:
        raise UndercapError(f"unknown fleet plan {mode!r}; choose one of {', '.join(MODES)}")
    chosen, excluded = [], []
    for node in nodes:
        try:
            chosen.append((node, choose_node(node, relative, mode, margin_w)))
        except InfeasibleError as e:
            excluded.append(_excluded(node, e, margin_w))
    if not chosen:
        raise InfeasibleError(
            "no node of the fleet can run the model under its cap: "
            + "; ".join(f"{e.name}: {e.reason}" for e in excluded)
        )
    rel = [_r(c, relative) for _, c in chosen]
    steps = split_work(
        [c.time_per_sample_s for _, c in chosen],
        rel,
        [c.batch_size for _, c in chosen],
        round_work,
        balanced=mode == BALANCED,
    )
    plans = tuple(_plan(n, c, r, k) for (n, c), r, k in zip(chosen, rel, steps))
    return RoundPlan(mode, float(round_work), plans, tuple(excluded))


def _r(choice: Any, relative: Mapping[int, float]) -> float:
    r = choice.relative_samples
    if r is None:
        r = relative.get(choice.batch_size)
    if r is None:
        raise UndercapError(
            f"no r(b) for batch size {choice.batch_size}: estimate it for every profiled "
            "batch size (undercap estimate --batch-sizes ...)"
        )
    return float(r)


def _plan(node: NodeFacts, c: Any, r: float, steps: int) -> NodePlan:
    samples = steps * c.batch_size
    return NodePlan(
        name=node.name,
        method=c.method,
        batch_size=c.batch_size,
        freq_mhz=c.freq_mhz,
        power_limit_w=node.power_limit_w,
        peak_power_w=c.peak_power_w,
        time_per_sample_s=c.time_per_sample_s,
        relative_samples=r,
        local_steps=steps,
        local_samples=samples,
        predicted_time_s=samples * c.time_per_sample_s,
    )


def _excluded(node: NodeFacts, e: InfeasibleError, margin_w: Optional[float]) -> Excluded:
    try:
        lowest: Optional[float] = lowest_feasible_power_w(node.profile, margin_w=margin_w)
    except UndercapError:
        lowest = None
    dev = node.profile.device.get("name", "?")
    return Excluded(node.name, node.power_limit_w, lowest, f"left out ({dev}): {e}")
