"""A log of every evaluation, in the formats people already read: CSV or JSON Lines
(by the file's suffix), and TensorBoard scalars when tensorboard is installed.

One row per evaluation (COLUMNS, then any extra numbers the first row has, e.g. loss:
a CSV's columns are fixed by its first row), flushed as written, so a killed run keeps
its log up to its last evaluation. A fresh run starts the file over; a resumed run
keeps the rows up to its checkpoint (the later ones it trains again) and appends.
Torch-free except for TensorBoard's writer. See docs/guides/lightning.md.
"""

import csv
import importlib.util
import json
import math
import time
from pathlib import Path
from typing import Any, Dict, Optional

from undercap.artifacts.io import PathLike, make_dirs, read_text, write_atomic
from undercap.errors import ArtifactError, UndercapError, require

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
    """Writes evaluation rows to a .csv or .jsonl file and/or TensorBoard."""

    def __init__(
        self,
        path: Optional[PathLike],
        tensorboard_dir: Optional[PathLike],
        resumed_at: Optional[int] = None,
    ) -> None:
        check_log(path, tensorboard_dir)
        self.path = None if path is None else Path(path)
        self._fh, self._csv = None, None
        self._tb = None
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter  # check_log: it is installed

            self._tb = SummaryWriter(log_dir=str(tensorboard_dir))
        if self.path is not None:
            make_dirs(self.path.parent)
            if resumed_at is None:
                write_atomic(self.path, "")  # a fresh run's log starts over
            else:
                _keep_rows_up_to(self.path, resumed_at)
            self._fh = self.path.open("a", newline="")

    @classmethod
    def open(
        cls,
        path: Optional[PathLike],
        tensorboard_dir: Optional[PathLike] = None,
        resumed_at: Optional[int] = None,
    ) -> "Optional[EvalLog]":
        """An EvalLog, or None when neither a file nor a TensorBoard folder is asked for.
        `resumed_at`: the samples a resumed run's checkpoint holds (None: a fresh run)."""
        if path is None and tensorboard_dir is None:
            return None
        return cls(path, tensorboard_dir, resumed_at)

    def write(self, row: Dict[str, Any]) -> None:
        if self._fh is not None:
            try:
                if self.path is not None and self.path.suffix == ".jsonl":
                    self._fh.write(json.dumps(_finite(row)) + "\n")
                else:
                    self._write_csv(row)
                self._fh.flush()
            except OSError as e:  # a full or capped disk: one line naming the log
                raise ArtifactError(
                    f"cannot write the evaluation log {self.path}: {e.strerror or e}"
                ) from e
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


def check_log(path: Optional[PathLike], tensorboard_dir: Optional[PathLike]) -> None:
    """What a log asked for can be written: a .csv or .jsonl file, TensorBoard
    installed. Called before a run starts (RunOptions), so a bad name costs nothing."""
    if path is not None and Path(path).suffix not in (".csv", ".jsonl"):
        raise UndercapError(f"evaluation log {path}: name it .csv or .jsonl")
    if tensorboard_dir is not None and importlib.util.find_spec("tensorboard") is None:
        require("tensorboard", "tensorboard", "TensorBoard logging")


def _keep_rows_up_to(path: Path, samples: int) -> None:
    """A resumed run's log: the rows of evaluations at or before its checkpoint."""
    if not path.exists():
        return
    text = read_text(path, what="evaluation log")
    if path.suffix == ".jsonl":
        rows = [ln for ln in text.splitlines() if ln.strip()]
        kept = [ln for ln in rows if _samples(_json_samples(ln)) <= samples]
        write_atomic(path, "".join(ln + "\n" for ln in kept))
        return
    lines = text.splitlines()
    if not lines:
        return
    reader = csv.DictReader(lines)
    kept = [lines[0]] + [
        line for line, row in zip(lines[1:], reader) if _samples(row.get("samples")) <= samples
    ]
    write_atomic(path, "\r\n".join(kept) + "\r\n")


def _json_samples(line: str) -> Any:
    try:
        return json.loads(line).get("samples")
    except (ValueError, AttributeError):  # a half-written last line
        return None


def _samples(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.inf  # a row that cannot say: the resumed run writes it again


def _finite(row: Dict[str, Any]) -> Dict[str, Any]:
    """JSON has no NaN: a diverged loss is written as null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
