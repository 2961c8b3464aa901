"""A log of every evaluation, in the formats people already read: CSV or JSON Lines
(by the file's suffix), and TensorBoard scalars when tensorboard is installed.

One row per evaluation: samples trained, device time (virtual on a simulated device),
energy, the metric, the robust peak and mean power so far, the configuration (batch
size, locked clock, cap) and the host's wall clock, then any extra numbers the first row has (e.g. loss: a CSV's
columns are fixed by its first row). Rows are flushed as they are
written, so a killed run keeps its log up to its last evaluation. A resumed run
appends. Torch-free except for TensorBoard's writer (torch.utils.tensorboard).
"""

import csv
import json
import math
import time
from pathlib import Path
from typing import Any, Dict, Optional, Union

from undercap.errors import UndercapError, require

#: the columns every row has, in this order (extras, such as loss, follow)
COLUMNS = (
    "samples",
    "device_time_s",
    "energy_j",
    "accuracy",
    "peak_power_w",
    "mean_power_w",
    "batch_size",
    "freq_mhz",
    "power_limit_w",
    "wall_s",
)


def eval_row(session: Any, accuracy: float, extra: Optional[Dict[str, Any]] = None) -> dict:
    """A row for a train.session.Session at an evaluation (`extra`: more numbers)."""
    acc = session.snapshot()
    t = float(acc["train_time_s"])
    row = {
        "samples": int(session.samples),
        "device_time_s": t,
        "energy_j": float(acc["energy_j"]),
        "accuracy": float(accuracy),
        "peak_power_w": float(acc["peak_w"]),
        "mean_power_w": float(acc["energy_j"]) / t if t > 0 else 0.0,
        "batch_size": session.batch_size,
        "freq_mhz": session.locked_mhz(),
        "power_limit_w": session.power_limit_w,
        "wall_s": time.time(),
    }
    row.update({k: float(v) for k, v in (extra or {}).items()})
    return row


class EvalLog:
    """Appends evaluation rows to a .csv or .jsonl file and/or TensorBoard."""

    def __init__(self, path: Optional[Path], tensorboard_dir: Optional[Path]) -> None:
        self.path, self._fh, self._csv = path, None, None
        self._tb = _tensorboard(tensorboard_dir) if tensorboard_dir is not None else None
        if path is not None:
            if path.suffix not in (".csv", ".jsonl"):
                raise UndercapError(f"evaluation log {path}: name it .csv or .jsonl")
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = path.open("a", newline="")

    @classmethod
    def open(
        cls, path: Union[str, Path, None], tensorboard_dir: Union[str, Path, None] = None
    ) -> "Optional[EvalLog]":
        """An EvalLog, or None when neither a file nor a TensorBoard folder is asked for."""
        if path is None and tensorboard_dir is None:
            return None
        return cls(
            None if path is None else Path(path),
            None if tensorboard_dir is None else Path(tensorboard_dir),
        )

    def write(self, row: Dict[str, Any]) -> None:
        if self._fh is not None:
            if self.path is not None and self.path.suffix == ".jsonl":
                self._fh.write(json.dumps(_finite(row)) + "\n")
            else:
                self._write_csv(row)
            self._fh.flush()
        if self._tb is not None:
            for key, value in row.items():
                if key not in ("samples", "wall_s") and isinstance(value, (int, float)):
                    self._tb.add_scalar(f"undercap/{key}", value, global_step=row["samples"])
            self._tb.flush()

    def _write_csv(self, row: Dict[str, Any]) -> None:
        if self._csv is None:
            fields = list(COLUMNS) + [k for k in row if k not in COLUMNS]
            self._csv = csv.DictWriter(self._fh, fieldnames=fields, extrasaction="ignore")
            if self._fh.tell() == 0:  # appending to a resumed run's log: no second header
                self._csv.writeheader()
        self._csv.writerow({k: "" if v is None else v for k, v in row.items()})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _finite(row: Dict[str, Any]) -> Dict[str, Any]:
    """JSON has no NaN: a diverged loss is written as null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def _tensorboard(log_dir: Path) -> Any:
    require("tensorboard", "tensorboard", "TensorBoard logging")
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(log_dir))
