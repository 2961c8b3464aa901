"""Crash-safe record of a device's original settings, and its replay.

`controlled()` restores settings on every exit path Python can catch (devices/base.py).
SIGKILL, the OOM killer and power loss cannot be caught, so a backend that changes
real hardware first writes the settings it is about to change to a state file here,
and removes it once they are back. `undercap restore` replays a file that was left
behind (devices.factory.replay reopens the device). Writes are atomic (temp file +
rename, artifacts.io.write_atomic), so a crash while writing never leaves half a file.

One file per device, `state-<device>.json`, in `$UNDERCAP_STATE_DIR`, else
`<root>/var/lib/undercap` (`<root>`: `/` on a real board, the copied tree in tests).
A file from an earlier boot is stale: the kernel reset every sysfs setting when it
booted, so replaying it is skipped (the boot id, /proc/sys/kernel/random/boot_id,
tells boots apart).
"""

import datetime as _dt
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from undercap import defaults
from undercap.artifacts.io import decode_text, write_atomic
from undercap.errors import DeviceError, DevicePermissionError

log = logging.getLogger(__name__)

SCHEMA = "undercap.device-state/1"
ENV_DIR = "UNDERCAP_STATE_DIR"


def state_dir(root: Union[str, Path] = "/") -> Path:
    """Where state files live: $UNDERCAP_STATE_DIR, else <root>/var/lib/undercap."""
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else Path(root) / defaults.STATE_DIR


def state_path(device_key: str, directory: Union[str, Path]) -> Path:
    """The state file of one device, e.g. state-jetson-57000000.gpu.json."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", device_key)
    return Path(directory) / f"state-{safe}.json"


def read_boot_id(root: Union[str, Path] = "/") -> Optional[str]:
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
    open_args: Dict[str, Any]
    state: Dict[str, Any]
    pid: int
    boot_id: Optional[str]
    created_utc: str

    def owner_running(self) -> bool:
        """The process that wrote the file is still alive (and is not us)."""
        return self.pid != os.getpid() and pid_alive(self.pid)

    def from_other_boot(self, current_boot_id: Optional[str]) -> bool:
        return bool(self.boot_id and current_boot_id and self.boot_id != current_boot_id)


def write_state(
    path: Union[str, Path],
    *,
    backend: str,
    device_key: str,
    open_args: Dict[str, Any],
    state: Dict[str, Any],
    boot_id: Optional[str],
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


def read_state(path: Union[str, Path]) -> SavedState:
    """Load and check a state file; malformed files raise DeviceError naming the file."""
    path = Path(path)
    try:
        obj = json.loads(decode_text(path.read_bytes(), path, what="state file", error=DeviceError))
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


def remove_state(path: Union[str, Path]) -> None:
    """Delete a state file once the settings are back (missing is fine)."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        raise DeviceError(f"settings restored, but cannot remove {path}: {e.strerror}") from e


def list_states(directory: Union[str, Path]) -> List[Path]:
    """State files in a folder, oldest name first."""
    d = Path(directory)
    return sorted(d.glob("state-*.json")) if d.is_dir() else []


class RestoresOnCrash:
    """Mixin for backends that change real hardware (Jetson, NVML): `save_state` and
    `restore_state` of devices.base.Device, from the backend's part below (the settings
    it may change, JSON-able; writing them back; how to reopen the device for `undercap
    restore`). The backend calls `_before_change()` right before its first write. With
    a `relay` (helper/client.py) a privileged helper makes the changes and keeps the
    state file: the outermost save acquires the device there, the matching restore
    releases it, and nothing is written here."""

    state_backend: str
    state_file: Path
    device_key: str
    name: str
    read_only: bool
    _depth = 0
    _original: Optional[Dict[str, Any]] = None
    _changed = False
    _state_written = False
    relay: Any = None
    # the backend's part
    _current_state: Callable[[], Dict[str, Any]]
    apply_state: Callable[[Dict[str, Any]], None]
    _state_open_args: Callable[[], Dict[str, Any]]
    boot_id: Callable[[], Optional[str]]

    def restore_hint(self) -> str:
        return f"undercap restore --state-file {self.state_file}"

    # --- shared -------------------------------------------------------------------
    def save_state(self) -> Dict[str, Any]:
        """Current settings. The outermost call also checks for a state file left by
        a crashed run; the file itself is written at the first actual change."""
        state = self._current_state()
        if self._depth == 0 and self.relay is not None:
            self.relay.acquire()
        elif self._depth == 0:
            self._check_leftover_state()
            self._original, self._changed, self._state_written = state, False, False
        self._depth += 1
        return state

    def restore_state(self, state: Dict[str, Any]) -> None:
        self._depth = max(0, self._depth - 1)
        if self.relay is not None:
            if self._depth == 0:
                self.relay.release()
            return
        # Only what differs is written back: a change that failed left nothing to undo.
        if self._changed and not self.read_only and self._current_state() != state:
            self.apply_state(state)
        if self._depth == 0:
            if self._state_written:
                remove_state(self.state_file)
            self._original, self._changed, self._state_written = None, False, False

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
            self.relay = None

    def _before_change(self) -> None:
        """Record the original settings (once per controlled session) before a write."""
        if self._depth == 0:
            raise DeviceError(
                "a clock was changed outside undercap.devices.controlled()/locked(); "
                "the settings would not be restored (internal error)"
            )
        if not self._state_written and self._original is not None:
            write_state(
                self.state_file,
                backend=self.state_backend,
                device_key=self.device_key,
                open_args=self._state_open_args(),
                state=self._original,
                boot_id=self.boot_id(),
            )
            self._state_written = True
        self._changed = True

    def _check_leftover_state(self) -> None:
        if not self.state_file.is_file():
            return
        saved = read_state(self.state_file)
        if saved.from_other_boot(self.boot_id()):
            if not self.read_only:  # the reboot reset the settings already: the file is stale
                remove_state(self.state_file)
            return
        if saved.owner_running():
            problem = f"another undercap process (pid {saved.pid}) is controlling {self.name}"
            fix = "wait for it to finish"
        else:
            problem = (
                f"an earlier undercap run (pid {saved.pid}) ended without restoring {self.name}"
            )
            fix = f"run `{self.restore_hint()}` to put back the settings saved in {self.state_file}"
        if self.read_only:
            log.warning("%s; measurements may be at its clocks (%s)", problem, fix)
            return
        raise DeviceError(f"{problem}; {fix}")
