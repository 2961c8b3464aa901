"""The JSON artifacts: load, validate, save atomically.

Schemas (DESIGN.md, kept stable):
* `undercap.profile/1`: the (b, f) lookup table measured on a device.
* `undercap.efficiency/1`: samples-to-target per batch size on a proxy dataset.

Every artifact carries a `schema` field and a `provenance` block. Loading validates
everything selection relies on, so a bad file fails here with one clear line
instead of producing a wrong choice later. No torch import.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from undercap.errors import ArtifactError

PROFILE_SCHEMA = "undercap.profile/1"
EFFICIENCY_SCHEMA = "undercap.efficiency/1"


# --- atomic I/O -------------------------------------------------------------------
def write_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path` via a temp file in the same folder + rename, so a crash
    never leaves a half-written artifact (rename is atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress_oserror():
            os.unlink(tmp)
        raise
    return path


class _suppress_oserror:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, *_: object) -> bool:
        return exc_type is not None and issubclass(exc_type, OSError)  # type: ignore[arg-type]


def save_json(path: str | Path, obj: Mapping[str, Any]) -> Path:
    """Save a JSON object atomically (NaN/inf are refused: they are not JSON)."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"
    except ValueError as e:
        raise ArtifactError(f"refusing to write {path}: {e}") from e
    return write_atomic(path, text)


def load_json(path: str | Path, *, what: str = "artifact") -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ArtifactError(f"{what} file {path} does not exist") from e
    except OSError as e:
        raise ArtifactError(f"cannot read {what} file {path}: {e.strerror}") from e
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path} is not valid JSON (line {e.lineno}: {e.msg})") from e
    if not isinstance(obj, dict):
        raise ArtifactError(f"{path}: expected a JSON object at the top level")
    return obj


def _check_schema(obj: Mapping[str, Any], expected: str, path: str | Path) -> None:
    got = obj.get("schema")
    if got != expected:
        raise ArtifactError(
            f"{path}: schema is {got!r}, expected {expected!r} (is this the right file?)"
        )


def _finite(value: Any, name: str, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArtifactError(f"{where}: {name} must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ArtifactError(f"{where}: {name} is {value!r}; it must be a finite number")
    if positive and x <= 0:
        raise ArtifactError(f"{where}: {name} must be positive, got {value!r}")
    if x < 0:
        raise ArtifactError(f"{where}: {name} must not be negative, got {value!r}")
    return x


# --- profile ------------------------------------------------------------------------
@dataclass(frozen=True)
class ProfileRow:
    batch_size: int
    freq_mhz: float
    time_per_sample_s: float
    peak_power_w: float
    mean_power_w: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "freq_mhz": self.freq_mhz,
            "time_per_sample_s": self.time_per_sample_s,
            "peak_power_w": self.peak_power_w,
            "mean_power_w": self.mean_power_w,
        }


@dataclass(frozen=True)
class Profile:
    """The measured lookup table t(b, f), P(b, f) for one model on one device."""

    device: dict[str, Any]
    model: str
    input_shape: tuple[int, ...]
    rows: tuple[ProfileRow, ...]
    simulated: bool = False
    mode: str = "full"  # "full" sweep or the paper's "efficient" sweep
    power_limit_w: float | None = None  # the limit an efficient sweep was run for
    unfit_batch_sizes: tuple[int, ...] = ()  # tried but did not fit in memory
    cost: dict[str, Any] = field(default_factory=dict)  # what profiling itself cost
    workload: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted({r.batch_size for r in self.rows}))

    @property
    def freqs_mhz(self) -> tuple[float, ...]:
        return tuple(sorted({r.freq_mhz for r in self.rows}))

    def row(self, batch_size: int, freq_mhz: float) -> ProfileRow | None:
        for r in self.rows:
            if r.batch_size == batch_size and r.freq_mhz == freq_mhz:
                return r
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PROFILE_SCHEMA,
            "device": self.device,
            "model": self.model,
            "input_shape": list(self.input_shape),
            "simulated": self.simulated,
            "mode": self.mode,
            "power_limit_w": self.power_limit_w,
            "unfit_batch_sizes": list(self.unfit_batch_sizes),
            "cost": self.cost,
            "workload": self.workload,
            "provenance": self.provenance,
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], path: str | Path = "<profile>") -> Profile:
        _check_schema(obj, PROFILE_SCHEMA, path)
        for key in ("device", "model", "input_shape", "rows"):
            if key not in obj:
                raise ArtifactError(f"{path}: missing field {key!r}")
        rows_obj = obj["rows"]
        if not isinstance(rows_obj, list) or not rows_obj:
            raise ArtifactError(f"{path}: 'rows' must be a non-empty list")
        rows = tuple(_profile_row(r, i, path) for i, r in enumerate(rows_obj))
        seen: set[tuple[int, float]] = set()
        for r in rows:
            key = (r.batch_size, r.freq_mhz)
            if key in seen:
                raise ArtifactError(
                    f"{path}: duplicate row for batch_size={r.batch_size}, "
                    f"freq_mhz={r.freq_mhz}; re-run the profile"
                )
            seen.add(key)
        try:
            shape = tuple(int(x) for x in obj["input_shape"])
        except (TypeError, ValueError) as e:
            raise ArtifactError(f"{path}: input_shape must be a list of integers") from e
        device = obj["device"]
        if not isinstance(device, dict):
            raise ArtifactError(f"{path}: 'device' must be an object")
        limit = obj.get("power_limit_w")
        return cls(
            device=device,
            model=str(obj["model"]),
            input_shape=shape,
            rows=rows,
            simulated=bool(obj.get("simulated", device.get("is_simulated", False))),
            mode=str(obj.get("mode", "full")),
            power_limit_w=None if limit is None else _finite(limit, "power_limit_w", str(path)),
            unfit_batch_sizes=tuple(int(b) for b in obj.get("unfit_batch_sizes", [])),
            cost=dict(obj.get("cost", {})),
            workload=dict(obj.get("workload", {})),
            provenance=dict(obj.get("provenance", {})),
        )


def _profile_row(r: Any, i: int, path: str | Path) -> ProfileRow:
    where = f"{path}: rows[{i}]"
    if not isinstance(r, dict):
        raise ArtifactError(f"{where} must be an object")
    fields = ("batch_size", "freq_mhz", "time_per_sample_s", "peak_power_w", "mean_power_w")
    missing = [k for k in fields if k not in r]
    if missing:
        raise ArtifactError(f"{where} is missing {', '.join(missing)}")
    b = r["batch_size"]
    if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
        raise ArtifactError(f"{where}: batch_size must be a positive integer, got {b!r}")
    return ProfileRow(
        batch_size=b,
        freq_mhz=_finite(r["freq_mhz"], "freq_mhz", where, positive=True),
        time_per_sample_s=_finite(
            r["time_per_sample_s"], "time_per_sample_s", where, positive=True
        ),
        peak_power_w=_finite(r["peak_power_w"], "peak_power_w", where, positive=True),
        mean_power_w=_finite(r["mean_power_w"], "mean_power_w", where, positive=True),
    )


def load_profile(path: str | Path) -> Profile:
    return Profile.from_dict(load_json(path, what="profile"), path)


def save_profile(path: str | Path, profile: Profile) -> Path:
    return save_json(path, profile.to_dict())


# --- efficiency ---------------------------------------------------------------------
@dataclass(frozen=True)
class Efficiency:
    """Samples-to-target N(b) per batch size and seed, and r(b) = N(b) / N(b_max).

    A batch size whose runs never reached the target has `None` runs and no
    `relative` entry: it is excluded from selection, visibly.
    """

    model: str
    dataset: str
    target_accuracy: float
    samples_to_target: dict[int, tuple[int | None, ...]]
    relative: dict[int, float]
    extra: dict[str, Any] = field(default_factory=dict)  # cost, curves, spread, provenance

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted(self.samples_to_target))

    @property
    def excluded_batch_sizes(self) -> tuple[int, ...]:
        return tuple(b for b in self.batch_sizes if b not in self.relative)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": EFFICIENCY_SCHEMA,
            "model": self.model,
            "dataset": self.dataset,
            "target_accuracy": self.target_accuracy,
            "samples_to_target": {
                str(b): list(runs) for b, runs in sorted(self.samples_to_target.items())
            },
            "relative": {str(b): r for b, r in sorted(self.relative.items())},
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], path: str | Path = "<efficiency>") -> Efficiency:
        _check_schema(obj, EFFICIENCY_SCHEMA, path)
        for key in ("model", "dataset", "target_accuracy", "samples_to_target", "relative"):
            if key not in obj:
                raise ArtifactError(f"{path}: missing field {key!r}")
        target = _finite(obj["target_accuracy"], "target_accuracy", str(path))
        if target > 1.0:
            raise ArtifactError(f"{path}: target_accuracy must be a fraction in (0, 1]")
        stt = _int_keyed(obj["samples_to_target"], "samples_to_target", path)
        runs: dict[int, tuple[int | None, ...]] = {}
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
            b: _finite(v, f"relative[{b}]", str(path), positive=True) for b, v in rel_obj.items()
        }
        _check_relative(runs, relative, path)
        known = {"schema", "model", "dataset", "target_accuracy", "samples_to_target", "relative"}
        return cls(
            model=str(obj["model"]),
            dataset=str(obj["dataset"]),
            target_accuracy=target,
            samples_to_target=runs,
            relative=relative,
            extra={k: v for k, v in obj.items() if k not in known},
        )


def _int_keyed(obj: Any, name: str, path: str | Path) -> dict[int, Any]:
    if not isinstance(obj, dict) or not obj:
        raise ArtifactError(f"{path}: {name!r} must be a non-empty object keyed by batch size")
    out: dict[int, Any] = {}
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
    runs: dict[int, tuple[int | None, ...]], relative: dict[int, float], path: str | Path
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


def load_efficiency(path: str | Path) -> Efficiency:
    return Efficiency.from_dict(load_json(path, what="efficiency"), path)


def save_efficiency(path: str | Path, eff: Efficiency) -> Path:
    return save_json(path, eff.to_dict())
