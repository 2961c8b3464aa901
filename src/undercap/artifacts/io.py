"""Atomic writes and JSON I/O: the one place files are written and read.

Every artifact, figure, checkpoint, weights file and cache entry is written through
`atomic_path`: to a temp file in the destination folder, fsync'd, then `os.replace`d
onto the destination. Rename is atomic on POSIX, so a crash or SIGKILL mid-write
leaves either the old file or the new one, never half of one. No torch import.
"""

import codecs
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, Type, Union

from undercap.errors import ArtifactError, UndercapError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - tomli is a core dependency before 3.11
    import tomli as tomllib

PathLike = Union[str, Path]


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temp path next to `path`; when the block succeeds the temp file is
    fsync'd, given the mode the user's umask gives new files, and renamed onto `path`;
    when it fails the temp file is removed and `path` is as it was. A write the disk or
    the folder refuses (full, too large, read-only, a file where a folder belongs) is
    one ArtifactError naming the path."""
    path = Path(path)
    make_dirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise ArtifactError(f"cannot write {path}: {_reason(e)}") from e
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _new_file_mode())  # mkstemp's 0600, not what the user's umask says
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ArtifactError(
                f"cannot write {path}: {_reason(e)}; the file is as it was before"
            ) from e
        raise


def _reason(e: OSError) -> str:
    """An OSError as a few words: its strerror ("No space left on device"), else str."""
    return e.strerror or str(e) or type(e).__name__


def _new_file_mode() -> int:
    """0666 less the process's umask: what open() would have given a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def make_dirs(folder: PathLike) -> Path:
    """mkdir -p, with a file in the way or a refused folder as one ArtifactError."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactError(f"cannot make the folder {folder}: {_blocker(folder, e)}") from e
    return folder


def _blocker(path: Path, e: OSError) -> str:
    """Why `path` cannot be made: the nearest ancestor that is a file, else the OS's words."""
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            return f"{parent} is a file, not a folder"
    return _reason(e)


def check_output(path: PathLike, *, folder: bool = False, what: str = "output") -> Path:
    """Refuse, before any work, an output that cannot be written: a file where a folder
    is needed on its way (or a folder where the file goes), or an ancestor the user may
    not write into. Makes nothing: a refused run leaves the disk as it was."""
    path = Path(path)
    if path.exists():
        if folder != path.is_dir():
            kind = "a folder" if path.is_dir() else "a file"
            raise ArtifactError(f"{what} {path} is {kind}; give a {'folder' if folder else 'file'}")
        target = path if folder else path.parent
        writable = os.access(target, os.W_OK | os.X_OK)  # novermin: flags, not types
        if not writable or not os.access(path, os.W_OK):
            raise ArtifactError(f"{what} {path}: not writable by this user")
        return path
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ArtifactError(f"{what} {path}: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):  # novermin: flags
        raise ArtifactError(f"{what} {path}: cannot create it in {ancestor} (not writable)")
    return path


def read_text(path: PathLike, *, what: str, error: Type[UndercapError] = ArtifactError) -> str:
    """A text file's contents: UTF-8, or UTF-8/16/32 with a byte-order mark (what
    Windows editors and PowerShell save). Missing, unreadable and undecodable files are
    one `error` naming `what` and the path."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as e:
        raise error(f"{what} {path} does not exist") from e
    except OSError as e:
        raise error(f"cannot read {what} {path}: {_reason(e)}") from e
    return decode_text(raw, path, what=what, error=error)


def decode_text(
    raw: bytes, path: PathLike, *, what: str, error: Type[UndercapError] = ArtifactError
) -> str:
    """`raw` as text, decoded as read_text decodes a file's bytes."""
    encoding = next((enc for bom, enc in _BOMS if raw.startswith(bom)), "utf-8")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as e:
        raise error(f"{what} {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from e


def has_bom(raw: bytes) -> bool:
    """Whether `raw` starts with a UTF-8/16/32 byte-order mark."""
    return any(raw.startswith(bom) for bom, _ in _BOMS)


# Longest first: UTF-32 LE's mark begins with UTF-16 LE's. The *-sig / BOM-aware codecs
# drop the mark.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def write_atomic(path: PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def save_json(
    path: PathLike,
    obj: Mapping[str, Any],
    check: Optional[Callable[[Dict[str, Any], PathLike], Any]] = None,
) -> Path:
    """Save a JSON object atomically (NaN/inf are refused: they are not JSON). `check`:
    the artifact's own loader, run on what would be written, so a file undercap would
    refuse to read is never written (ArtifactError, the old file as it was)."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"
    except ValueError as e:
        raise ArtifactError(f"refusing to write {path}: {e}") from e
    if check is not None:
        try:
            check(json.loads(text), path)
        except ArtifactError as e:
            raise ArtifactError(f"refusing to write {e}") from e
    return write_atomic(path, text)


def load_json(path: PathLike, *, what: str = "artifact") -> Dict[str, Any]:
    """A JSON object from `path`; every problem is one ArtifactError naming the file."""
    path = Path(path)
    text = read_text(path, what=f"{what} file")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path} is not valid JSON (line {e.lineno}: {e.msg})") from e
    if not isinstance(obj, dict):
        raise ArtifactError(f"{path}: expected a JSON object at the top level")
    return obj


def check_schema(
    obj: Mapping[str, Any], expected: str, path: PathLike, hint: str = " (is this the right file?)"
) -> None:
    """One ArtifactError naming `path`, ending in `hint`, unless `obj`'s schema is `expected`."""
    got = obj.get("schema")
    if got != expected:
        raise ArtifactError(f"{path}: schema is {got!r}, expected {expected!r}{hint}")


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


def one_of(value: Any, choices: Tuple[str, ...], name: str, where: str) -> Any:
    """`value` if it is one of `choices`, else one ArtifactError naming the field."""
    if value not in choices:
        raise ArtifactError(f"{where}: {name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def from_fields(cls: Any, obj: Mapping[str, Any], may_lack: Tuple[str, ...] = ()) -> Any:
    """The dataclass `cls` from a JSON object, each field converted by its annotation
    (int, float, str, bool, Optional, Tuple, Dict, a dataclass); other keys are ignored.
    A missing field takes its default (None if named in `may_lack`), else KeyError."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name in obj:
            kw[f.name] = _convert(hints[f.name], obj[f.name])
        elif f.name in may_lack:
            kw[f.name] = None
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise KeyError(f.name)
    return cls(**kw)


def _convert(tp: Any, x: Any) -> Any:
    origin, args = getattr(tp, "__origin__", None), getattr(tp, "__args__", None)
    if origin is Union:  # Optional[T]
        return None if x is None else _convert(args[0], x)
    if origin in (tuple, Tuple):
        return tuple(_convert(args[0], v) for v in x)
    if origin in (dict, Dict):
        return dict(x)
    if dataclasses.is_dataclass(tp):
        return tp.from_dict(x) if hasattr(tp, "from_dict") else from_fields(tp, x)
    return x if tp is Any else tp(x)


def file_sha256(path: PathLike, *, what: str = "file") -> str:
    """Hex SHA-256 of a file's bytes (identifies weights in cache keys and configs)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError as e:
        raise ArtifactError(f"{what} {path} does not exist") from e
    except OSError as e:
        raise ArtifactError(f"cannot read {what} {path}: {_reason(e)}") from e
    return h.hexdigest()


LOCK_NAME = ".undercap.lock"


@contextlib.contextmanager
def folder_lock(folder: PathLike, *, what: str = "output folder") -> Iterator[Path]:
    """Hold `folder` for this process while the block runs: a second undercap command
    into it is one ArtifactError naming the holder's pid. The lock is an flock(2) on
    `folder/.undercap.lock`, which the kernel drops when its process ends, however it
    ends, so a killed run never leaves the folder stuck. The lock file goes when the
    block ends, and so does a folder this made that is still empty. (No fcntl, as on
    Windows: no lock.)"""
    folder = Path(folder)
    made = not folder.exists()
    make_dirs(folder)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not a platform undercap runs on
        yield folder
        return
    path = folder / LOCK_NAME
    fd = _locked_fd(fcntl, path, folder, what)
    try:
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield folder
    finally:
        with contextlib.suppress(OSError):
            os.unlink(str(path))  # while still held: the next holder makes a new file
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if nothing was written into it


def _locked_fd(fcntl: Any, path: Path, folder: Path, what: str) -> int:
    """An fd holding the flock of `path`, the file that is at `path` now: a holder that
    was releasing may have unlinked the file this opened (then open the new one)."""
    while True:
        try:
            fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o666)  # novermin: flags
        except OSError as e:
            raise ArtifactError(f"cannot lock the {what} {folder}: {_reason(e)}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # novermin: flags
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ArtifactError(
                f"the {what} {folder} is in use by another undercap command (pid {holder}); "
                "wait for it to finish or give another folder"
            ) from e
        try:
            same = os.stat(str(path)).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            return fd
        os.close(fd)


def read_toml(
    path: PathLike, what: str, error: Type[UndercapError] = UndercapError
) -> Dict[str, Any]:
    """A TOML file (device specs, fleet files) as a dict; an unreadable or malformed
    file is one `error` naming `what` and the path."""
    text = read_text(path, what=what, error=error)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{what} {path} is not valid TOML: {e}") from e
