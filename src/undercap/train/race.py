"""The race on the target, on the device: what each candidate's fork did and the
record train.json keeps (the rule itself: select/race.py; running it in `undercap
run`: recipes/race.py).

Each candidate is an ordinary device run (train_on_device, the same session: clocks
locked at its frequency, the power guard holding the cap, time and energy accounted)
ended by `time_budget_s` with an evaluation at its budget, its checkpoint kept. The
winner's checkpoint is continued as the training; the others' device time and energy
are the race's cost, added to the training's time to accuracy and energy here
(`with_race`), so the race is never free in a reported number.
"""

import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from undercap.artifacts.train_result import TrainResult
from undercap.select.race import RacePlan, Verdict, judge, race_cost


@dataclass(frozen=True)
class Lane:
    """One candidate's fork in the race: its evaluations on the device's clock."""

    batch_size: int
    freq_mhz: Optional[float]
    curve: Tuple[Tuple[float, int, float], ...]  # (device_time_s, samples, accuracy)
    train_time_s: float
    energy_j: float
    samples: int
    reached: bool
    peak_power_w: float
    limit_exceeded: bool

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["curve"] = [{"device_time_s": t, "samples": n, "accuracy": a} for t, n, a in self.curve]
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Lane":
        curve = tuple(
            (float(p["device_time_s"]), int(p["samples"]), float(p["accuracy"])) for p in d["curve"]
        )
        return cls(**{**d, "curve": curve})


def lane_of(result: TrainResult, evals_csv: Path) -> Lane:
    """A lane from its run's result and evaluation log (device time per evaluation)."""
    with open(evals_csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    curve = tuple(
        (float(r["device_time_s"]), int(r["samples"]), float(r["accuracy"])) for r in rows
    )
    return Lane(
        batch_size=result.batch_size,
        freq_mhz=result.freq_mhz_requested,
        curve=curve,
        train_time_s=result.train_time_s,
        energy_j=result.energy_j,
        samples=result.samples_trained,
        reached=result.reached,
        peak_power_w=result.peak_power_w,
        limit_exceeded=result.limit_exceeded,
    )


@dataclass(frozen=True)
class RaceRecord:
    """What train.json's "race" holds: the plan, every lane, the verdict, the cost."""

    plan: Dict[str, Any]
    lanes: Tuple[Lane, ...]
    verdict: Dict[str, Any]
    winner: Dict[str, Any]  # {"batch_size", "freq_mhz"}
    cost_s: float  # the losers' device time: added to the time to accuracy
    cost_j: float  # the losers' energy: added to the energy

    def to_dict(self) -> Dict[str, Any]:
        return {
            "plan": self.plan,
            "lanes": [lane.to_dict() for lane in self.lanes],
            "verdict": self.verdict,
            "winner": self.winner,
            "cost_s": self.cost_s,
            "cost_j": self.cost_j,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "RaceRecord":
        lanes = tuple(Lane.from_dict(x) for x in d["lanes"])
        return cls(d["plan"], lanes, d["verdict"], d["winner"], d["cost_s"], d["cost_j"])


def decide(plan: RacePlan, lanes: List[Lane], target_accuracy: float) -> RaceRecord:
    """Judge the lanes run so far (select/race.judge) and count the cost. A lane ends at
    the first step past the budget, so its every evaluation is within its own run."""
    budget = max([plan.budget_s] + [lane.train_time_s for lane in lanes])
    verdict: Verdict = judge([lane.curve for lane in lanes], target_accuracy, budget, plan.margin)
    spent = [lane.train_time_s for lane in lanes]
    w = lanes[verdict.index]
    energy = math.fsum(lane.energy_j for i, lane in enumerate(lanes) if i != verdict.index)
    return RaceRecord(
        plan=plan.to_dict(),
        lanes=tuple(lanes),
        verdict=verdict.to_dict(),
        winner={"batch_size": w.batch_size, "freq_mhz": w.freq_mhz},
        cost_s=race_cost(verdict, spent),
        cost_j=energy,
    )


def with_race(result: TrainResult, record: RaceRecord) -> TrainResult:
    """The winner's training result with the race's cost counted in (its own lane is
    already in it: the training continued from that fork)."""
    t = result.train_time_s + record.cost_s
    e = result.energy_j + record.cost_j
    tta = None if result.time_to_accuracy_s is None else result.time_to_accuracy_s + record.cost_s
    elapsed = t + result.pause_time_s
    return dataclasses.replace(
        result,
        time_to_accuracy_s=tta,
        train_time_s=t,
        energy_j=e,
        mean_power_w=e / elapsed if elapsed > 0 else 0.0,
        peak_power_w=max([result.peak_power_w] + [lane.peak_power_w for lane in record.lanes]),
        limit_exceeded=result.limit_exceeded or any(x.limit_exceeded for x in record.lanes),
        race=record.to_dict(),
    )


def lane_line(lane: Lane) -> str:
    """The progress output's line for one lane."""
    last = lane.curve[-1] if lane.curve else None
    acc = "no evaluation" if last is None else f"accuracy {last[2]:.3f}"
    freq = "" if lane.freq_mhz is None else f" at {lane.freq_mhz:g} MHz"
    done = ", reached the target" if lane.reached else ""
    return (
        f"race: b={lane.batch_size}{freq}: {acc} after {lane.samples} samples, "
        f"{lane.train_time_s:.3g} s and {lane.energy_j:.3g} J of device time{done}"
    )
