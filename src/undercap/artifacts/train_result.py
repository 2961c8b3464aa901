"""The result of one training run on a device (`undercap train`), as a JSON artifact.

Torch-free, so reports read results without loading it. `time_to_accuracy_s` and
`train_time_s` are on the device's clock (virtual on a simulated device, wall on
hardware) and cover training steps only; evaluation is never charged to training:
`eval_time_s` on the device's clock, `eval_wall_s` on the host.
"""

from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from undercap.artifacts.io import check_schema, load_json, save_json
from undercap.errors import ArtifactError

TRAIN_SCHEMA = "undercap.train/1"
_TUPLES = ("guard_events", "curve", "warnings", "segments")  # JSON lists


@dataclass(frozen=True)
class RunTotals:
    """What every training run on a device reports, undercap's own loop (`TrainResult`)
    and a loop of your own (train/api.py's `CappedResult`) alike: built by one session
    (train/session/), so the two never count differently."""

    reached: bool
    time_to_accuracy_s: Optional[float]  # device-clock training time to the target; None if missed
    train_time_s: float  # device-clock training time of the whole run
    samples_to_target: Optional[int]
    steps: int
    energy_j: float  # energy of the training steps (evaluation excluded)
    peak_power_w: float  # robust peak (PowerSampler), the figure limits are checked against
    mean_power_w: float  # energy_j over the training time and the time paused for power
    batch_size: int
    freq_mhz_start: Optional[float]  # read back after locking
    freq_mhz_final: Optional[float]  # after any guard step-downs
    power_limit_w: Optional[float]  # a fixed cap's limit (a changing one: `segments`)
    limit_exceeded: bool  # the robust peak went above the limit (a segment, its own)
    guard_events: Tuple[Dict[str, Any], ...]
    simulated: bool


@dataclass(frozen=True)
class RunNotes:
    """The parts of RunTotals that older results and simple runs may lack."""

    pause_time_s: float = 0.0  # paused for lack of power (a changing cap); in time_to_accuracy_s
    segments: Tuple[Dict[str, Any], ...] = ()  # one per interval with one configuration
    warnings: Tuple[str, ...] = ()
    # "locked" (freq_mhz_requested held), "as found" (none asked for) or "read-only:
    # clocks as found" (the device's clocks may not be changed here); None: older results
    clocks: Optional[str] = None


@dataclass(frozen=True)
class _Trained:
    """What only undercap's own loop knows of its run."""

    samples_trained: int
    final_accuracy: float
    target_accuracy: float
    energy_source: str  # "counter" (device energy counter) or "sampler" (integrated power)
    max_raw_power_w: float  # highest single reading, noise included
    eval_wall_s: float  # host seconds spent evaluating (not charged to training)
    train_wall_s: float  # host seconds spent in training steps
    lr: float
    freq_mhz_requested: Optional[float]  # None: clocks left as they were
    guard_window_s: float
    device: Dict[str, Any]
    model: str
    dataset: str
    curve: Tuple[Dict[str, Any], ...]  # {"samples", "accuracy", "loss"} per evaluation


@dataclass(frozen=True)
class TrainResult(RunNotes, _Trained, RunTotals):
    """One training run of undercap's own loop on a device: device-clock training time
    (evaluation apart, `eval_time_s`), energy, power and the guard's events (RunTotals'
    fields), and what the loop knows of it (its curve, learning rate, data, model)."""

    resumed_from: Optional[int] = None  # samples in the checkpoint the run last resumed from
    schedule: Optional[str] = None  # the cap's schedule or live source, if it changed
    config: Dict[str, Any] = field(default_factory=dict)
    provenance: Dict[str, Any] = field(default_factory=dict)
    # device seconds spent evaluating (simulated: modelled); None in older results
    eval_time_s: Optional[float] = None
    # which grid points were evaluated, and how (train/loop/evalplan.py: "schedule",
    # "looks", "full_evaluations", "screened_items"); None in older results
    evaluation: Optional[Dict[str, Any]] = None
    # the arithmetic trained in (fp32, fp16 or bf16 mixed precision); `host_precision`:
    # the host's where it stood in for it (a simulated board on a CPU)
    precision: str = "fp32"
    host_precision: Optional[str] = None

    @property
    def time_basis(self) -> str:
        return "virtual" if self.simulated else "wall"

    @property
    def best_accuracy(self) -> float:
        """The highest accuracy any evaluation saw (what a missed target came closest to)."""
        return max([float(c["accuracy"]) for c in self.curve] + [self.final_accuracy])

    def outcome(self) -> str:
        """One line: reached, or how close it came."""
        target = f"target {self.target_accuracy:.1%}"
        if self.reached:
            return f"{target} reached after {self.samples_to_target} samples"
        return (
            f"{target} not reached: best accuracy "
            f"{self.best_accuracy:.2%} in {self.samples_trained} samples"
        )

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        for key in _TUPLES:
            d[key] = list(d[key])
        return {"schema": TRAIN_SCHEMA, "time_basis": self.time_basis, **d}

    @classmethod
    def from_dict(
        cls, obj: Mapping[str, Any], path: Union[str, Path] = "<train result>"
    ) -> "TrainResult":
        check_schema(obj, TRAIN_SCHEMA, path, hint="")
        names = {f.name for f in fields(cls)}
        required = [
            f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
        ]
        missing = sorted(n for n in required if n not in obj)
        if missing:
            raise ArtifactError(f"{path}: missing field(s) {', '.join(missing)}")
        return cls(**{k: tuple(v) if k in _TUPLES else v for k, v in obj.items() if k in names})


def save_train_result(path: Union[str, Path], result: TrainResult) -> Path:
    return save_json(path, result.to_dict(), TrainResult.from_dict)


def load_train_result(path: Union[str, Path]) -> TrainResult:
    return TrainResult.from_dict(load_json(path, what="training result"), path)
