"""The efficiency artifact `undercap.efficiency/1`: N(b) per seed and r(b) on a proxy;
and `undercap.efficiency-set/1`: several proxies' estimates in one file.

r(b) = N(b) / N(b_max) with relative[str(max b)] == 1.0. Loading validates all of it.
No torch import. Each of a set's `proxies` is a distinct `name` and a whole single-proxy
artifact, unchanged, so one can be cut out and used alone. `load_efficiencies` reads
either schema (one artifact: a set of one).
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from undercap.artifacts.io import PathLike, check_schema, finite, load_json, save_json
from undercap.errors import ArtifactError

EFFICIENCY_SCHEMA = "undercap.efficiency/1"
EFFICIENCY_SET_SCHEMA = "undercap.efficiency-set/1"
_FIELDS = ("model", "dataset", "target_accuracy", "samples_to_target", "relative")


@dataclass(frozen=True)
class Efficiency:
    """Samples-to-target N(b) per batch size and seed, and r(b) = N(b) / N(b_max).

    A batch size whose runs never reached the target has `None` runs and no
    `relative` entry: it is excluded from selection, visibly.
    """

    model: str
    dataset: str
    target_accuracy: float
    samples_to_target: Dict[int, Tuple[Optional[int], ...]]
    relative: Dict[int, float]
    extra: Dict[str, Any] = field(default_factory=dict)  # cost, curves, spread, provenance

    @property
    def batch_sizes(self) -> Tuple[int, ...]:
        return tuple(sorted(self.samples_to_target))

    @property
    def samples_bmax(self) -> Optional[float]:
        """N(b_max): the mean samples the reference batch size took to the target (the
        scale that turns r(b) into samples, time and energy); None if unknown."""
        means = self.extra.get("samples_to_target_mean") or {}
        ref = self.extra.get("reference_batch_size") or max(self.relative)
        if means.get(str(ref)) is not None:
            return float(means[str(ref)])
        runs = [n for n in self.samples_to_target.get(int(ref), ()) if n is not None]
        return sum(runs) / len(runs) if runs else None

    @property
    def excluded_batch_sizes(self) -> Tuple[int, ...]:
        return tuple(b for b in self.batch_sizes if b not in self.relative)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema": EFFICIENCY_SCHEMA,
            "model": self.model,
            "dataset": self.dataset,
            "target_accuracy": self.target_accuracy,
            "samples_to_target": {
                str(b): list(runs) for b, runs in sorted(self.samples_to_target.items())
            },
            "relative": {str(b): r for b, r in sorted(self.relative.items())},
            **self.extra,
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], path: PathLike = "<efficiency>") -> "Efficiency":
        check_schema(obj, EFFICIENCY_SCHEMA, path)
        for key in _FIELDS:
            if key not in obj:
                raise ArtifactError(f"{path}: missing field {key!r}")
        target = finite(obj["target_accuracy"], "target_accuracy", str(path))
        if target > 1.0:
            raise ArtifactError(f"{path}: target_accuracy must be a fraction in (0, 1]")
        stt = _int_keyed(obj["samples_to_target"], "samples_to_target", path)
        runs: Dict[int, Tuple[Optional[int], ...]] = {}
        for b, v in stt.items():
            if not isinstance(v, list) or not v:
                raise ArtifactError(f"{path}: samples_to_target[{b}] must be a non-empty list")
            for x in v:
                if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x <= 0):
                    raise ArtifactError(
                        f"{path}: samples_to_target[{b}] has {x!r}; use positive ints or null"
                    )
            runs[b] = tuple(v)
        rel_obj = _int_keyed(obj["relative"], "relative", path)
        relative = {
            b: finite(v, f"relative[{b}]", str(path), positive=True) for b, v in rel_obj.items()
        }
        _check_relative(runs, relative, path)
        return cls(
            model=str(obj["model"]),
            dataset=str(obj["dataset"]),
            target_accuracy=target,
            samples_to_target=runs,
            relative=relative,
            extra={k: v for k, v in obj.items() if k != "schema" and k not in _FIELDS},
        )


def _int_keyed(obj: Any, name: str, path: PathLike) -> Dict[int, Any]:
    if not isinstance(obj, dict) or not obj:
        raise ArtifactError(f"{path}: {name!r} must be a non-empty object keyed by batch size")
    out: Dict[int, Any] = {}
    for k, v in obj.items():
        try:
            b = int(k)
        except ValueError as e:
            raise ArtifactError(f"{path}: {name} key {k!r} is not a batch size") from e
        if b <= 0 or str(b) != str(k).strip():
            raise ArtifactError(f"{path}: {name} key {k!r} is not a positive integer")
        out[b] = v
    return out


def _check_relative(
    runs: Dict[int, Tuple[Optional[int], ...]], relative: Dict[int, float], path: PathLike
) -> None:
    extra = sorted(set(relative) - set(runs))
    if extra:
        raise ArtifactError(f"{path}: relative has batch sizes {extra} with no runs")
    if not relative:
        raise ArtifactError(f"{path}: no batch size reached the target; nothing to select")
    for b in relative:
        if all(x is None for x in runs[b]):
            raise ArtifactError(f"{path}: batch size {b} has no finished run but a relative value")
    b_max = max(relative)
    if not math.isclose(relative[b_max], 1.0, rel_tol=1e-6):
        raise ArtifactError(
            f"{path}: relative[{b_max}] is {relative[b_max]}, but the largest batch size "
            "must have r = 1.0 (r(b) = N(b) / N(b_max))"
        )


def load_efficiency(path: PathLike) -> Efficiency:
    obj = load_json(path, what="efficiency")
    if obj.get("schema") == EFFICIENCY_SET_SCHEMA:
        n = len(obj.get("proxies") or [])
        raise ArtifactError(
            f"{path} holds {n} proxies' estimates (an efficiency set); give it where several "
            "proxies are accepted (select/run/compare --efficiency), or load_efficiencies()"
        )
    return Efficiency.from_dict(obj, path)


def save_efficiency(path: PathLike, eff: Efficiency) -> Path:
    return save_json(path, eff.to_dict(), Efficiency.from_dict)


# --- several proxies ------------------------------------------------------------------------
@dataclass(frozen=True)
class EfficiencySet:
    """Several proxies' estimates of one model, each under a distinct name."""

    names: Tuple[str, ...]
    members: Tuple[Efficiency, ...]

    def __post_init__(self) -> None:
        if not self.members or len(self.names) != len(self.members):
            raise ArtifactError("an efficiency set needs one name per member, and a member")
        if len(set(self.names)) != len(self.names):
            raise ArtifactError(f"efficiency set: proxy names {list(self.names)} repeat")
        models = sorted({e.model for e in self.members})
        if len(models) > 1:
            raise ArtifactError(
                f"efficiency set mixes models {models}; estimate every proxy for one model"
            )

    @property
    def model(self) -> str:
        return self.members[0].model

    @property
    def relatives(self) -> Dict[str, Dict[int, float]]:
        """name -> r(b), what select.ensemble takes."""
        return {n: dict(e.relative) for n, e in zip(self.names, self.members)}

    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema": EFFICIENCY_SET_SCHEMA,
            "model": self.model,
            "proxies": [
                {"name": n, "efficiency": e.to_dict()} for n, e in zip(self.names, self.members)
            ],
        }

    @classmethod
    def of(cls, members: Sequence[Efficiency]) -> "EfficiencySet":
        """A set named by `proxy_names`."""
        return cls(proxy_names(members), tuple(members))

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], path: PathLike = "<efficiency>") -> "EfficiencySet":
        if obj.get("schema") == EFFICIENCY_SCHEMA:
            eff = Efficiency.from_dict(obj, path)
            return cls(proxy_names([eff]), (eff,))
        check_schema(obj, EFFICIENCY_SET_SCHEMA, path)
        items = obj.get("proxies")
        if not isinstance(items, list) or not items:
            raise ArtifactError(f"{path}: 'proxies' must be a non-empty list")
        names, members = [], []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or "efficiency" not in item:
                raise ArtifactError(f"{path}: proxies[{i}] needs 'name' and 'efficiency'")
            members.append(Efficiency.from_dict(item["efficiency"], f"{path}: proxies[{i}]"))
            names.append(str(item.get("name") or members[-1].dataset))
        return cls(tuple(names), tuple(members))


def proxy_names(members: Sequence[Efficiency]) -> Tuple[str, ...]:
    """Distinct readable names: the dataset, plus its subset and split seed where the
    estimate's config has them, plus #k where those still repeat."""
    base = []
    for e in members:
        cfg = e.extra.get("config") or {}
        extra = [f"{cfg['limit']}-sample subset"] if cfg.get("limit") else []
        extra += [f"split seed {cfg['data_seed']}"] if cfg.get("data_seed") else []
        base.append(e.dataset + (f" [{', '.join(extra)}]" if extra else ""))
    return tuple(
        n if base.count(n) == 1 else f"{n} #{base[:i].count(n) + 1}" for i, n in enumerate(base)
    )


def load_efficiencies(paths: Sequence[PathLike]) -> EfficiencySet:
    """Every proxy in these files (single artifacts or sets), as one set; names are
    made distinct again across files."""
    members: List[Efficiency] = []
    names: List[str] = []
    for path in paths:
        one = EfficiencySet.from_dict(load_json(path, what="efficiency"), path)
        members += one.members
        names += one.names
    if len(set(names)) != len(names):
        names = list(proxy_names(members))
    return EfficiencySet(tuple(names), tuple(members))


def save_efficiency_set(path: PathLike, effs: EfficiencySet) -> Path:
    """One proxy: the single-proxy artifact (unchanged format); several: the set."""
    if len(effs.members) == 1:
        return save_efficiency(path, effs.members[0])
    return save_json(path, effs.to_dict(), EfficiencySet.from_dict)
