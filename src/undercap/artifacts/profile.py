"""The profile artifact `undercap.profile/1`: the measured lookup table t(b, f), P(b, f).

Loading validates everything selection relies on (rows, finite positive numbers, no
duplicates), so a bad file fails here with one clear line instead of producing a
wrong choice later. No torch import.
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Set, Tuple, Union

from undercap import defaults
from undercap.artifacts.io import PathLike, check_schema, finite, load_json, one_of, save_json
from undercap.errors import ArtifactError

PROFILE_SCHEMA = "undercap.profile/1"


#: optional row fields (profiles since the adaptive sweep; older rows lack them):
#: peak_margin_w   the safety margin selection adds to peak_power_w (profile/margin.py)
#: noise_w         sensor noise of one reading, from the measurement's readings
#: peak_spread_w   spread (std) of the peak over the measurement's repeated windows
#: steps           measured mini-batches; duration_s: measured device time
OPTIONAL_ROW_FIELDS = ("peak_margin_w", "noise_w", "peak_spread_w", "steps", "duration_s")
_MEASURED = ("time_per_sample_s", "peak_power_w", "mean_power_w")  # positive numbers


@dataclass(frozen=True)
class ProfileRow:
    batch_size: int
    freq_mhz: float
    time_per_sample_s: float
    peak_power_w: float
    mean_power_w: float
    peak_margin_w: Optional[float] = None
    noise_w: Optional[float] = None
    peak_spread_w: Optional[float] = None
    steps: Optional[int] = None
    duration_s: Optional[float] = None
    #: the arithmetic measured: fp32, or fp16/bf16 mixed precision (a row of a profile
    #: made before precisions were measured is fp32)
    precision: str = "fp32"

    def to_dict(self) -> Dict[str, Any]:
        keys = ("batch_size", "freq_mhz", "precision", *_MEASURED, *OPTIONAL_ROW_FIELDS)
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


@dataclass(frozen=True)
class Profile:
    """The measured lookup table t(b, f), P(b, f) for one model on one device."""

    device: Dict[str, Any]
    model: str
    input_shape: Tuple[int, ...]
    rows: Tuple[ProfileRow, ...]
    simulated: bool = False
    mode: str = "full"  # "full" sweep or the paper's "efficient" sweep
    power_limit_w: Optional[float] = None  # the limit an efficient sweep was run for
    unfit_batch_sizes: Tuple[int, ...] = ()  # tried but did not fit in memory
    cost: Dict[str, Any] = field(default_factory=dict)  # what profiling itself cost
    workload: Dict[str, Any] = field(default_factory=dict)
    provenance: Dict[str, Any] = field(default_factory=dict)
    #: how the efficient sweep chose what to measure: its limit, the r(b) it pruned
    #: with, batch sizes pruned and why (profile/sweep.py); how margins were sized
    sweep: Dict[str, Any] = field(default_factory=dict)

    def with_margin(self, margin_w: Optional[float]) -> "Profile":
        """This profile with every row's safety margin set to `margin_w` (None: as
        measured), for code that selects from rows (a changing cap re-selects)."""
        if margin_w is None:
            return self
        rows = tuple(dataclasses.replace(r, peak_margin_w=float(margin_w)) for r in self.rows)
        return dataclasses.replace(self, rows=rows)

    @property
    def batch_sizes(self) -> Tuple[int, ...]:
        return tuple(sorted({r.batch_size for r in self.rows}))

    @property
    def freqs_mhz(self) -> Tuple[float, ...]:
        return tuple(sorted({r.freq_mhz for r in self.rows}))

    def row(
        self, batch_size: int, freq_mhz: float, precision: Optional[str] = None
    ) -> Optional[ProfileRow]:
        matches = (r for r in self.rows if (r.batch_size, r.freq_mhz) == (batch_size, freq_mhz))
        return next((r for r in matches if precision in (None, r.precision)), None)

    @property
    def precisions(self) -> Tuple[str, ...]:
        """The precisions measured, in undercap's order (fp32, fp16, bf16)."""
        have = {r.precision for r in self.rows}
        return tuple(p for p in defaults.PRECISIONS if p in have)

    def in_precision(self, precision: str) -> "Profile":
        """This profile's rows in `precision` alone; a profile without them is one line
        saying to profile in it."""
        if self.precisions == (precision,):
            return self
        rows = tuple(r for r in self.rows if r.precision == precision)
        if not rows:
            raise ArtifactError(
                f"the profile of {self.model} has no {precision} rows (it measured "
                f"{', '.join(self.precisions)}); profile again with --precision {precision}"
            )
        return dataclasses.replace(self, rows=rows)

    @property
    def clock(self) -> str:
        """How its rows' clocks came about: "observed" (a read-only profile measures at
        the clock the device runs) or "chosen" (each row's clock was locked)."""
        return "observed" if self.mode == "read-only" else "chosen"

    def to_dict(self) -> Dict[str, Any]:
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
            **({"sweep": self.sweep} if self.sweep else {}),
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], path: PathLike = "<profile>") -> "Profile":
        check_schema(obj, PROFILE_SCHEMA, path)
        for key in ("device", "model", "input_shape", "rows"):
            if key not in obj:
                raise ArtifactError(f"{path}: missing field {key!r}")
        rows_obj = obj["rows"]
        if not isinstance(rows_obj, list) or not rows_obj:
            raise ArtifactError(f"{path}: 'rows' must be a non-empty list")
        rows = tuple(_profile_row(r, i, path) for i, r in enumerate(rows_obj))
        seen: Set[Tuple[int, float, str]] = set()
        for r in rows:
            key = (r.batch_size, r.freq_mhz, r.precision)
            if key in seen:
                raise ArtifactError(
                    f"{path}: duplicate row for batch_size={r.batch_size}, "
                    f"freq_mhz={r.freq_mhz}, precision {r.precision}; re-run the profile"
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
            power_limit_w=None if limit is None else finite(limit, "power_limit_w", str(path)),
            unfit_batch_sizes=tuple(int(b) for b in obj.get("unfit_batch_sizes", [])),
            cost=dict(obj.get("cost", {})),
            workload=dict(obj.get("workload", {})),
            provenance=dict(obj.get("provenance", {})),
            sweep=dict(obj.get("sweep") or {}),
        )


def _profile_row(r: Any, i: int, path: PathLike) -> ProfileRow:
    where = f"{path}: rows[{i}]"
    if not isinstance(r, dict):
        raise ArtifactError(f"{where} must be an object")
    fields = ("batch_size", "freq_mhz", *_MEASURED)
    missing = [k for k in fields if k not in r]
    if missing:
        raise ArtifactError(f"{where} is missing {', '.join(missing)}")
    b = r["batch_size"]
    if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
        raise ArtifactError(f"{where}: batch_size must be a positive integer, got {b!r}")
    precision = one_of(r.get("precision", "fp32"), defaults.PRECISIONS, "precision", where)
    return ProfileRow(
        precision=precision,
        batch_size=b,
        **{k: finite(r[k], k, where, positive=True) for k in fields[1:]},
        **{
            k: (int if k == "steps" else float)(finite(r[k], k, where))
            for k in OPTIONAL_ROW_FIELDS
            if r.get(k) is not None
        },
    )


def load_profile(path: PathLike) -> Profile:
    return Profile.from_dict(load_json(path, what="profile"), path)


def as_profile(profile: Union[Profile, PathLike]) -> Profile:
    """A Profile as it is, or the one at a path."""
    return profile if isinstance(profile, Profile) else load_profile(profile)


def save_profile(path: PathLike, profile: Profile) -> Path:
    return save_json(path, profile.to_dict(), Profile.from_dict)
