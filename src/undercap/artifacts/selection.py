"""The selection artifact `undercap.selection/1`: the configuration to train with.

The layout is in docs/reference/formats.md: the choice at the top level, a `training`
block that makes device training repeat what r(b) was measured with (the largest batch
and base learning rate of the sqrt scaling, the weights, budgets), and everything else
(candidates, exclusions, baselines, provenance) kept as it is under the other keys.

Older shapes still load: the v0.1 `run` file (the choice nested under "choice") and
the v0.1 `select --json` output (flat, no schema). Their training block is rebuilt
from the efficiency artifact they name, or the `efficiency.json` beside them (the
layout of a `run` folder). No torch import.
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from undercap.artifacts.io import PathLike, check_schema, finite, load_json, one_of, save_json
from undercap.defaults import PRECISIONS
from undercap.errors import ArtifactError

SELECTION_SCHEMA = "undercap.selection/1"
_CHOICE = ("method", "batch_size", "freq_mhz", "time_per_sample_s", "peak_power_w")
_OPTIONAL = ("relative_samples", "score")
_IDENTITY = ("model", "device", "simulated", "power_limit_w", "clock", "precision")
_KNOWN = {"schema", "choice", "training", *_CHOICE, *_OPTIONAL, *_IDENTITY}  # not `extra`
#: how the choice's clock came about: chosen among the device's clocks (a profile made
#: with clock control) or observed (a read-only profile: the clock the device ran at)
CLOCKS = ("chosen", "observed")


@dataclass(frozen=True)
class Selection:
    """One chosen configuration and what it takes to train with it."""

    method: str
    batch_size: int
    freq_mhz: float
    time_per_sample_s: float
    peak_power_w: float
    power_limit_w: Optional[float]
    model: Optional[str]
    device: Optional[str]
    simulated: bool
    relative_samples: Optional[float] = None
    score: Optional[float] = None
    training: Dict[str, Any] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)
    clock: str = "chosen"  # CLOCKS: "observed" on a read-only device
    #: the arithmetic to train in: fp32, fp16 or bf16 mixed precision (older files: fp32)
    precision: str = "fp32"

    def lock_mhz(self) -> Optional[float]:
        """The clock training should lock: the chosen one; None (the clocks as found)
        where the selection only observed the clock its device ran at."""
        return self.freq_mhz if self.clock == "chosen" else None

    def batch_ladder(self) -> Tuple[int, ...]:
        """The batch sizes feasible under the limit (the candidates), ascending: where
        a read-only device goes over its cap, the guard steps down through these."""
        rows = self.extra.get("candidates") or []
        return tuple(sorted({int(c["batch_size"]) for c in rows if "batch_size" in c}))

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"schema": SELECTION_SCHEMA}
        for k in (*_CHOICE, *_OPTIONAL, *_IDENTITY):
            out[k] = getattr(self, k)
        out["training"] = dict(self.training)
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], path: PathLike = "<selection>") -> "Selection":
        if obj.get("schema") is not None:  # v0.1's `select --json` output has none
            check_schema(obj, SELECTION_SCHEMA, path, hint="")
        nested = obj.get("choice")
        flat = dict(nested, **{k: obj[k] for k in _IDENTITY if k in obj}) if nested else obj
        missing = [k for k in ("batch_size", "freq_mhz", "power_limit_w") if k not in flat]
        if missing:
            raise ArtifactError(
                f"{path} has no {missing[0]!r}; pass a selection written by `undercap select "
                "--json`, `undercap run` or `undercap compare`"
            )
        extra = {k: v for k, v in obj.items() if k not in _KNOWN}
        return cls(**_fields(flat, str(path)), extra=extra)


def _fields(d: Mapping[str, Any], where: str) -> Dict[str, Any]:
    b = d["batch_size"]
    if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
        raise ArtifactError(f"{where}: batch_size must be a positive integer, got {b!r}")
    limit = d.get("power_limit_w")
    clock = one_of(d.get("clock", "chosen"), CLOCKS, "clock", where)
    precision = one_of(d.get("precision", "fp32"), PRECISIONS, "precision", where)
    return {
        "method": str(d.get("method", "ours")),
        "batch_size": b,
        "freq_mhz": finite(d["freq_mhz"], "freq_mhz", where, positive=True),
        "time_per_sample_s": float(d.get("time_per_sample_s") or 0.0),
        "peak_power_w": float(d.get("peak_power_w") or 0.0),
        "power_limit_w": None if limit is None else finite(limit, "power_limit_w", where),
        "model": d.get("model"),
        "device": d.get("device"),
        "simulated": bool(d.get("simulated", False)),
        "relative_samples": _opt_float(d.get("relative_samples")),
        "score": _opt_float(d.get("score")),
        "training": dict(d.get("training") or {}),
        "clock": clock,
        "precision": precision,
    }


def _opt_float(x: Any) -> Optional[float]:
    return None if x is None else float(x)


def _training_from_efficiency(sel_path: Path, extra: Mapping[str, Any]) -> Dict[str, Any]:
    """v0.1 files: the LR scaling from the efficiency artifact the selection used."""
    named = extra.get("efficiency")
    if isinstance(named, list):  # several proxies (`select --efficiency A --efficiency B`)
        named = named[0] if named else None  # one model's estimates: one b_max and base LR
    candidates = [Path(named), sel_path.parent / named] if named else []  # equal if absolute
    candidates.append(sel_path.parent / "efficiency.json")
    found = next((p for p in candidates if p.is_file()), None)
    cfg = {} if found is None else load_json(found, what="efficiency").get("config") or {}
    pairs = (("max_batch_size", cfg.get("b_max")), ("base_lr", cfg.get("base_lr")))
    return {k: v for k, v in pairs if v is not None}


def related_artifact(sel_path: PathLike, sel: Selection, kind: str) -> Optional[Path]:
    """The profile or efficiency artifact a selection was made from: the path it names
    (`select --json` records both), else `<kind>.json` beside it (a `run` folder)."""
    sel_path = Path(sel_path)
    named = sel.extra.get(kind)
    candidates = [Path(named), sel_path.parent / named] if isinstance(named, str) else []
    candidates.append(sel_path.parent / f"{kind}.json")
    return next((p for p in candidates if p.is_file()), None)


def load_selection(path: PathLike) -> Selection:
    path = Path(path)
    sel = Selection.from_dict(load_json(path, what="selection"), path)
    if sel.training:
        return sel
    return dataclasses.replace(sel, training=_training_from_efficiency(path, sel.extra))


def save_selection(path: PathLike, selection: Selection) -> Path:
    return save_json(path, selection.to_dict(), Selection.from_dict)
