"""A replay device: time and power looked up from measured (b, f) configurations.

`trace:<file.csv>` opens a board's measured training costs as a device, so that
profile -> select -> train runs on measured numbers instead of the simulator's model,
for the measured configurations only (the format, with an example:
docs/concepts/simulated.md, "Replaying measured numbers instead"). One row (COLUMNS) per
configuration, one board per file; `board` is a bundled simulated device whose idle
power, memory, rail, sensor noise and virtual clock the replay keeps; `model` the
workload's name as `undercap profile --model` takes it; time_per_sample_s in s per
training sample, power_w the mean board input power in W. Every batch size of a model
must be measured at every clock of the file (the device's frequency table).
"""

import csv
import dataclasses
import math
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from undercap.artifacts.io import read_text
from undercap.artifacts.workload import Workload
from undercap.devices.base import DeviceInfo
from undercap.devices.simulated.device import SPEC_DIR, SimulatedDevice, known_names
from undercap.devices.simulated.model import StepModel, load_spec, voltage_v
from undercap.errors import DeviceError, DeviceOutOfMemoryError

COLUMNS = ("board", "model", "batch_size", "freq_mhz", "time_per_sample_s", "power_w")
Key = Tuple[str, int, float]  # (model, batch size, MHz)


class NotMeasuredError(DeviceOutOfMemoryError):
    """A batch size the trace does not hold: treated like one that does not fit."""


@dataclasses.dataclass(frozen=True)
class Trace:
    path: str
    board: str
    points: Dict[Key, Tuple[float, float]]  # -> (time_per_sample_s, power_w)

    @property
    def freqs_mhz(self) -> Tuple[float, ...]:
        return tuple(sorted({f for _, _, f in self.points}))

    def batch_sizes(self, model: str) -> List[int]:
        return sorted({b for m, b, _ in self.points if m == model})


def _number(raw: Dict[str, str], column: str, where: str) -> float:
    try:
        x = float(raw[column])
    except (TypeError, ValueError):
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        raise DeviceError(f"{where}: {column} must be a positive number, got {raw[column]!r}")
    return x


def _parse(raw: Dict[str, str], where: str) -> Tuple[str, Key, Tuple[float, float]]:
    b = _number(raw, "batch_size", where)
    if b != int(b):
        raise DeviceError(f"{where}: batch_size must be a whole number, got {raw['batch_size']!r}")
    key = (raw["model"].strip(), int(b), _number(raw, "freq_mhz", where))
    value = (_number(raw, "time_per_sample_s", where), _number(raw, "power_w", where))
    return raw["board"].strip(), key, value


def read_trace(path: Union[str, Path]) -> Trace:
    """Read and check a trace file; every problem is one DeviceError line."""
    path = Path(path)
    reader = csv.DictReader(read_text(path, what="trace", error=DeviceError).splitlines())
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise DeviceError(f"trace {path}: missing column(s) {', '.join(missing)}")
    parsed = [_parse(raw, f"trace {path} line {i}") for i, raw in enumerate(reader, 2)]
    boards = {board for board, _, _ in parsed}
    if len(boards) != 1:
        raise DeviceError(f"trace {path}: needs rows of exactly one board, found {sorted(boards)}")
    points: Dict[Key, Tuple[float, float]] = {}
    for _, key, value in parsed:
        if key in points:
            raise DeviceError(f"trace {path}: {key[0]} at b={key[1]}, {key[2]:g} MHz appears twice")
        points[key] = value
    trace = Trace(str(path), boards.pop(), points)
    for model, b in sorted({(m, b) for m, b, _ in points}):  # every (model, b) at every clock
        lacking = [f for f in trace.freqs_mhz if (model, b, f) not in points]
        if lacking:
            raise DeviceError(
                f"trace {path}: {model} at b={b} lacks {', '.join(f'{f:g}' for f in lacking)}"
                " MHz; measure every batch size at every clock of the file"
            )
    return trace


class TraceDevice(SimulatedDevice):
    """Replays a trace (module docstring) on the virtual clock of a simulated board."""

    def __init__(self, trace: Trace, *, seed: int = 0, read_only: bool = False) -> None:
        if trace.board not in known_names():
            known = ", ".join(known_names())
            raise DeviceError(f"trace {trace.path}: unknown board {trace.board!r}; known: {known}")
        base = load_spec(SPEC_DIR / f"{trace.board}.toml")
        spec = dataclasses.replace(
            base,
            freqs_mhz=trace.freqs_mhz,
            description=f"measurements replayed from {Path(trace.path).name} ({base.description})",
        )
        super().__init__(spec, seed=seed, read_only=read_only)
        self.name = f"trace:{trace.path}"
        self.trace = trace

    def model_step(self, workload: Workload, batch_size: int, freq_mhz: float) -> StepModel:
        point = self.trace.points.get((workload.model, batch_size, float(freq_mhz)))
        if point is None:
            raise self._not_measured(workload, batch_size, freq_mhz)
        t, power_w = point
        step_s = t * batch_size
        return StepModel(
            batch_size=batch_size,
            freq_mhz=float(freq_mhz),
            step_time_s=step_s,
            time_per_sample_s=t,
            power_w=power_w,
            fits=True,
            memory_bytes_needed=0.0,  # not measured: whatever ran, fitted
            compute_time_s=step_s,
            memory_time_s=0.0,
            occupancy=1.0,
            voltage_v=voltage_v(self.spec, freq_mhz),
        )

    def check_fits(self, workload: Workload, batch_size: int) -> None:
        if batch_size not in self.trace.batch_sizes(workload.model):
            raise self._not_measured(workload, batch_size, None)

    def _not_measured(self, workload: Workload, b: int, freq_mhz: Optional[float]) -> DeviceError:
        held = self.trace.batch_sizes(workload.model)
        at = "" if freq_mhz is None else f" at {float(freq_mhz):g} MHz"
        what = f"batch sizes {', '.join(map(str, held))}" if held else "no batch size of it"
        cls = NotMeasuredError if freq_mhz is None else DeviceError
        return cls(
            f"{self.name}: {workload.model} was not measured at batch size {b}{at} (the trace "
            f"holds {what}); use a measured configuration"
        )

    def info(self) -> DeviceInfo:
        info = super().info()
        note = (
            f"REPLAYED measurements from {self.trace.path}: time and power of the measured "
            f"(b, f) only, with {self.trace.board}'s idle power and sensor noise; not a live board"
        )
        details = dict(info.details, note=note, trace_file=self.trace.path)
        return dataclasses.replace(info, backend="trace", details=details)
