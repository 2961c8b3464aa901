"""A fleet run's settings: what the server plans with and what every node is told.
Torch-free and Flower-free. `undercap fleet` builds a FleetConfig from its flags, `flwr
run` from the app's run config (`[tool.flwr.app.config]` in the Flower app's
pyproject.toml; keys with dashes: model, dataset, fleet-file, efficiency, ...).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from undercap.data.spec import DataSpec
from undercap.errors import UndercapError
from undercap.fleet.plan import BALANCED, MODES
from undercap.fleet.spec import FleetSpec, load_fleet


@dataclass(frozen=True)
class FleetConfig:
    fleet: FleetSpec
    model: str
    data: DataSpec
    target_accuracy: float
    relative: Dict[int, float]  # r(b) (undercap estimate); its batch sizes are profiled
    mode: str = BALANCED  # plan.MODES
    partition: str = "iid"  # partition.py: iid or dirichlet:ALPHA
    round_work: Optional[float] = None  # b_max-equivalent samples per round; None: one epoch
    max_rounds: int = 50
    seed: int = 0
    base_lr: Optional[float] = None  # at the largest batch; None: the model's
    optimizer: str = "adam"  # the local optimizer: adam (the model's) or sgd
    momentum: float = 0.0
    margin_w: Optional[float] = None  # safety margin for every row; None: as profiled
    eval_max_samples: Optional[int] = None
    cache_dir: Optional[str] = None  # where nodes keep their profiles
    efficiency_source: str = "<r(b)>"
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def batch_sizes(self) -> Tuple[int, ...]:
        return tuple(sorted(self.relative))

    def check(self) -> FleetConfig:
        if self.mode not in MODES:
            raise UndercapError(f"--plan {self.mode!r}: choose one of {', '.join(MODES)}")
        if not 0.0 < self.target_accuracy <= 1.0:
            raise UndercapError(f"target accuracy {self.target_accuracy} must be in (0, 1]")
        if self.max_rounds < 1:
            raise UndercapError("--max-rounds must be at least 1")
        if self.round_work is not None and self.round_work <= 0:
            raise UndercapError("--round-samples must be positive")
        if not self.relative:
            raise UndercapError("no r(b): give --efficiency FILE (undercap estimate)")
        if self.optimizer not in ("adam", "sgd"):
            raise UndercapError(f"--local-optimizer {self.optimizer!r}: use adam or sgd")
        if not 0.0 <= self.momentum < 1.0:
            raise UndercapError("--momentum must be in [0, 1)")
        return self

    def node_setup(self) -> Dict[str, Any]:
        """What every node needs to load its data and profile (sent as JSON)."""
        return {
            "model": self.model,
            "data": self.data.key(),
            "partition": self.partition,
            "seed": self.seed,
            "batch_sizes": list(self.batch_sizes),
            "relative": {str(b): r for b, r in sorted(self.relative.items())},
            "fleet": self.fleet.to_dict(),
            "cache_dir": self.cache_dir,
        }

    def to_dict(self) -> Dict[str, Any]:
        setup = self.node_setup()
        return {**asdict(self), **{k: setup[k] for k in ("fleet", "data", "relative")}}


def data_spec(d: Mapping[str, Any]) -> DataSpec:
    """A DataSpec back from its key() (JSON)."""
    d = dict(d)
    if d.get("input_shape") is not None:
        d["input_shape"] = tuple(d["input_shape"])
    return DataSpec(**d)


def setup_json(cfg: FleetConfig) -> str:
    return json.dumps(cfg.node_setup(), sort_keys=True)


def from_run_config(
    run_config: Mapping[str, Any], app_dir: Optional[Union[str, Path]] = None
) -> FleetConfig:
    """A FleetConfig from a Flower app's run config (`flwr run`; keys with dashes).
    Relative `fleet-file` and `efficiency` paths are read from `app_dir` (the Flower
    app's folder, which `flwr run` ships to the SuperLink; None: the working directory)."""
    from undercap.artifacts.efficiency import load_efficiency

    def get(key: str, default: Any = None) -> Any:
        value = run_config.get(key, default)
        return default if value == "" else value

    def path(key: str) -> str:
        p = Path(str(get(key))).expanduser()
        return str(p if p.is_absolute() or app_dir is None else Path(app_dir) / p)

    if not get("fleet-file") or not get("efficiency"):
        raise UndercapError("the app's run config needs fleet-file and efficiency (paths)")
    eff = load_efficiency(path("efficiency"))
    limit = get("limit")
    return FleetConfig(
        fleet=load_fleet(path("fleet-file")),
        model=str(get("model", eff.model)),
        data=DataSpec(str(get("dataset", "digits")), limit=None if limit is None else int(limit)),
        target_accuracy=float(get("target-accuracy", 0.9)),
        relative={int(b): float(r) for b, r in eff.relative.items()},
        mode=str(get("plan", BALANCED)),
        partition=str(get("partition", "iid")),
        round_work=None if get("round-samples") is None else float(get("round-samples")),
        max_rounds=int(get("max-rounds", 50)),
        seed=int(get("seed", 0)),
        optimizer=str(get("local-optimizer", "adam")),
        cache_dir=get("cache-dir"),
        efficiency_source=path("efficiency"),
        extra={"out_dir": get("out-dir", "fleet-out")},
    ).check()
