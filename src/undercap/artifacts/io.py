"""Atomic writes and JSON I/O: the one place files are written and read.

Every artifact, figure, checkpoint, weights file and cache entry is written through
`atomic_path`: to a temp file in the destination folder, fsync'd, then `os.replace`d
onto the destination. Rename is atomic on POSIX, so a crash or SIGKILL mid-write
leaves either the old file or the new one, never half of one. No torch import.
"""

import contextlib
import hashlib
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Type, Union

from undercap.errors import ArtifactError, UndercapError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - tomli is a core dependency before 3.11
    import tomli as tomllib

PathLike = Union[str, Path]


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temp path next to `path`; when the block succeeds the temp file is
    fsync'd and renamed onto `path`, when it fails the temp file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def save_json(path: PathLike, obj: Mapping[str, Any]) -> Path:
    """Save a JSON object atomically (NaN/inf are refused: they are not JSON)."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"
    except ValueError as e:
        raise ArtifactError(f"refusing to write {path}: {e}") from e
    return write_atomic(path, text)


def load_json(path: PathLike, *, what: str = "artifact") -> Dict[str, Any]:
    """A JSON object from `path`; every problem is one ArtifactError naming the file."""
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


def check_schema(obj: Mapping[str, Any], expected: str, path: PathLike) -> None:
    got = obj.get("schema")
    if got != expected:
        raise ArtifactError(
            f"{path}: schema is {got!r}, expected {expected!r} (is this the right file?)"
        )


def finite(value: Any, name: str, where: str, *, positive: bool = False) -> float:
    """A finite, non-negative (or positive) number from an artifact field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArtifactError(f"{where}: {name} must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ArtifactError(f"{where}: {name} is {value!r}; it must be a finite number")
    if positive and x <= 0:
        raise ArtifactError(f"{where}: {name} must be positive, got {value!r}")
    if x < 0:
        raise ArtifactError(f"{where}: {name} must not be negative, got {value!r}")
    return x


def file_sha256(path: PathLike, *, what: str = "file") -> str:
    """Hex SHA-256 of a file's bytes (identifies weights in cache keys and configs)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError as e:
        raise ArtifactError(f"{what} {path} does not exist") from e
    return h.hexdigest()


def read_toml(
    path: PathLike, what: str, error: Type[UndercapError] = UndercapError
) -> Dict[str, Any]:
    """A TOML file (device specs, fleet files) as a dict; an unreadable or malformed
    file is one `error` naming `what` and the path."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise error(f"{what} {path} is not valid TOML: {e}") from e
