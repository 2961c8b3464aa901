"""Crash-safe record of a device's original settings, and its replay.

`controlled()` restores settings on every exit path Python can catch (devices/base.py).
SIGKILL, the OOM killer and power loss cannot be caught, so a backend that changes
real hardware first writes the settings it is about to change to a state file here,
and removes it once they are back. `undercap restore` replays a file that was left
behind. Writes are atomic (temp file + rename, artifacts.write_atomic), so a crash
while writing never leaves half a file.

Location: `$UNDERCAP_STATE_DIR`, else `<root>/var/lib/undercap` where `<root>` is the
filesystem root the backend works on (`/` on a real board, the copied tree in tests),
one file per device: `state-<device>.json`.

A file from an earlier boot is stale: the kernel reset every sysfs setting when it
booted, so replaying it is skipped (the boot id, /proc/sys/kernel/random/boot_id,
tells boots apart).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from undercap.artifacts import write_atomic
from undercap.errors import DeviceError, DevicePermissionError

SCHEMA = "undercap.device-state/1"
ENV_DIR = "UNDERCAP_STATE_DIR"


def state_dir(root: str | Path = "/") -> Path:
    """Where state files live: $UNDERCAP_STATE_DIR, else <root>/var/lib/undercap."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    return Path(root) / "var" / "lib" / "undercap"


def state_path(device_key: str, directory: str | Path) -> Path:
    """The state file of one device, e.g. state-jetson-57000000.gpu.json."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", device_key)
    return Path(directory) / f"state-{safe}.json"


def read_boot_id(root: str | Path = "/") -> str | None:
    """The kernel's per-boot random id, or None where it cannot be read."""
    try:
        return (Path(root) / "proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (signal 0 checks without signalling)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@dataclass(frozen=True)
class SavedState:
    """One state file: what to reopen (backend + open_args) and what to put back."""

    path: Path
    backend: str  # "jetson" or "nvml"
    device_key: str
    open_args: dict[str, Any]
    state: dict[str, Any]
    pid: int
    boot_id: str | None
    created_utc: str

    def owner_running(self) -> bool:
        """The process that wrote the file is still alive (and is not us)."""
        return self.pid != os.getpid() and pid_alive(self.pid)

    def from_other_boot(self, current_boot_id: str | None) -> bool:
        return bool(self.boot_id and current_boot_id and self.boot_id != current_boot_id)


def write_state(
    path: str | Path,
    *,
    backend: str,
    device_key: str,
    open_args: dict[str, Any],
    state: dict[str, Any],
    boot_id: str | None,
) -> Path:
    """Record the original settings before anything is changed (atomic write)."""
    obj = {
        "schema": SCHEMA,
        "backend": backend,
        "device_key": device_key,
        "open_args": open_args,
        "state": state,
        "pid": os.getpid(),
        "boot_id": boot_id,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    path = Path(path)
    try:
        return write_atomic(path, json.dumps(obj, indent=2) + "\n")
    except PermissionError as e:
        raise DevicePermissionError(
            f"cannot write the state file {path}: permission denied; run as root (sudo) "
            f"or set {ENV_DIR} to a writable folder"
        ) from e
    except OSError as e:
        raise DeviceError(
            f"cannot write the state file {path}: {e.strerror}; set {ENV_DIR} to a writable folder"
        ) from e


class RecordsOriginalState:
    """Mixin for backends that change real hardware: `_record_original()` writes the
    settings saved before the first change to the state file, once per controlled
    session, so `undercap restore` can replay them after SIGKILL or power loss."""

    state_backend: str  # "jetson" or "nvml": how `replay` reopens the device
    state_file: Path
    device_key: str
    _original: dict[str, Any] | None
    _state_written: bool

    def _state_open_args(self) -> dict[str, Any]:
        raise NotImplementedError

    def boot_id(self) -> str | None:
        raise NotImplementedError

    def _record_original(self) -> None:
        if self._state_written or self._original is None:
            return
        write_state(
            self.state_file,
            backend=self.state_backend,
            device_key=self.device_key,
            open_args=self._state_open_args(),
            state=self._original,
            boot_id=self.boot_id(),
        )
        self._state_written = True


def read_state(path: str | Path) -> SavedState:
    """Load and check a state file; malformed files raise DeviceError naming the file."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise DeviceError(f"state file {path} does not exist") from e
    except PermissionError as e:
        raise DevicePermissionError(f"cannot read {path}: permission denied; run as root") from e
    except (OSError, json.JSONDecodeError) as e:
        raise DeviceError(f"{path} is not a readable undercap state file ({e})") from e
    if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
        raise DeviceError(f"{path} is not an undercap state file (schema {SCHEMA!r} expected)")
    try:
        return SavedState(
            path=path,
            backend=str(obj["backend"]),
            device_key=str(obj["device_key"]),
            open_args=dict(obj["open_args"]),
            state=dict(obj["state"]),
            pid=int(obj["pid"]),
            boot_id=obj.get("boot_id"),
            created_utc=str(obj.get("created_utc", "")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise DeviceError(f"{path}: state file is missing or has a bad field ({e})") from e


def remove_state(path: str | Path) -> None:
    """Delete a state file once the settings are back (missing is fine)."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        raise DeviceError(f"settings restored, but cannot remove {path}: {e.strerror}") from e


def list_states(directory: str | Path) -> list[Path]:
    """State files in a folder, oldest name first."""
    d = Path(directory)
    return sorted(d.glob("state-*.json")) if d.is_dir() else []


def replay(path: str | Path, *, force: bool = False, **device_kwargs: Any) -> str:
    """Put back the settings recorded in a state file, then remove it.

    Reopens the device the file names (jetson: its sysfs root; nvml: its index/uuid)
    and calls its `apply_state`. Refuses while the process that wrote the file is
    still running (it restores on exit) unless `force`. A file from an earlier boot is
    removed without writing anything. `device_kwargs` go to the backend's constructor
    (tests pass a fake kernel writer or NVML module). Returns a one-line summary.
    """
    saved = read_state(path)
    if saved.owner_running() and not force:
        raise DeviceError(
            f"process {saved.pid} that changed {saved.device_key} is still running and "
            "restores the settings itself when it exits; stop it, or pass --force"
        )
    device = _open_for_restore(saved, **device_kwargs)
    try:
        if saved.from_other_boot(device.boot_id()):
            remove_state(saved.path)
            return (
                f"{saved.device_key}: the board rebooted since {saved.created_utc}, which "
                f"reset these settings; removed stale {saved.path}"
            )
        device.apply_state(saved.state)
    finally:
        device.close()
    remove_state(saved.path)
    return f"{saved.device_key}: restored the settings saved at {saved.created_utc} ({saved.path})"


def _open_for_restore(saved: SavedState, **kwargs: Any) -> Any:
    if saved.backend == "jetson":
        from undercap.devices.jetson import JetsonDevice

        root = kwargs.pop("sysfs_root", saved.open_args.get("sysfs_root", "/"))
        return JetsonDevice(root, state_file=saved.path, **kwargs)
    if saved.backend == "nvml":
        from undercap.devices.nvml import NvmlDevice

        index = int(saved.open_args.get("index", 0))
        return NvmlDevice(
            index,
            allow_clock_control=True,
            expect_uuid=saved.open_args.get("uuid"),
            state_file=saved.path,
            **kwargs,
        )
    raise DeviceError(f"{saved.path}: unknown backend {saved.backend!r} in state file")
