"""The kernel side of sysfs writes for a fake Jetson tree, in both devfreq generations.

Plain files cannot run the kernel's store handlers, so `FakeKernel.write` is passed to
the backend as its writer. Its state (the PM QoS requests of 5.x kernels, a thermal
cap, a GPU that registers with devfreq late) lives in <root>/.fake-kernel.json, so a
kernel re-created from another process (tests/test_jetson.py's lock holder) agrees.

* Linux 4.9 (L4T R32; drivers/devfreq/devfreq.c min_freq_store/max_freq_store): the
  value written is stored and shown back; min above max (or max below min) is EINVAL.
* Linux 5.10/5.15 (L4T R35/R36; devfreq on PM QoS since 5.5): min_freq updates the
  user's min request, rounded down to kHz; max_freq the user's max request, rounded
  up to kHz, 0 meaning no limit; nothing is rejected. Reads show get_freq_range():
  the table's ends narrowed by every request (user's and a thermal cooling device's,
  `set_thermal_cap`) and min clamped to max.
* nvgpu on R36 registers the GPU with devfreq at its first power-up: a GPU built
  `late` gets its devfreq node when 0 is written to railgate_enable (jetson_clocks
  R36, do_igpu), and keeps it.
Read-only attributes refuse writes (EACCES), as do 0644 files for a non-root writer.
"""

import errno
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

READ_ONLY_ATTRS = frozenset(
    {"cur_freq", "available_frequencies", "available_governors", "target_freq", "trans_stat"}
)
KHZ = 1000


def load_state(root: Path) -> Dict[str, Any]:
    return json.loads((Path(root) / ".fake-kernel.json").read_text())


def save_state(root: Path, state: Dict[str, Any]) -> None:
    (Path(root) / ".fake-kernel.json").write_text(json.dumps(state, indent=1))


def _set(path: Path, value: int) -> None:
    """Kernel-side update of an attribute, whatever its mode."""
    mode = os.stat(path).st_mode & 0o777
    os.chmod(path, 0o644)
    path.write_text(f"{value}\n")
    os.chmod(path, mode)


def effective_range(state: Dict[str, Any]) -> Tuple[int, int]:
    """get_freq_range() of Linux 5.x devfreq over the stored requests."""
    table = state["table"]
    lo, hi = table[0], table[-1]
    lo = max(lo, KHZ * state["user_min_khz"])
    caps = [c for c in (state["user_max_khz"], state.get("thermal_max_khz")) if c is not None]
    if caps:
        hi = min(hi, KHZ * min(caps))
    return min(lo, hi), hi


def refresh(
    devfreq: Path, state: Dict[str, Any], cap_hz: Optional[int] = None, *, idle: bool = False
) -> None:
    """Recompute what the node shows: on 5.x the effective range; on both, cur_freq
    as the governor picks it: under load the highest step the limits allow, idle
    (a freshly built tree) the lowest."""
    if state["qos"]:
        lo, hi = effective_range(state)
        _set(devfreq / "min_freq", lo)
        _set(devfreq / "max_freq", hi)
    if idle:
        lo = int((devfreq / "min_freq").read_text())
        cur = min([f for f in state["table"] if f >= lo] or state["table"][-1:])
        for attr in ("cur_freq", "target_freq"):
            _set(devfreq / attr, cur)
        return
    hi = int((devfreq / "max_freq").read_text()) or state["table"][-1]  # 4.9: 0 = none
    for cap in (cap_hz, state.get("thermal_max_khz") and KHZ * state["thermal_max_khz"]):
        hi = min(hi, cap) if cap else hi
    table = state["table"]
    cur = max([f for f in table if f <= hi] or table[:1])  # caps win over a minimum
    for attr in ("cur_freq", "target_freq"):
        _set(devfreq / attr, cur)


class FakeKernel:
    """Applies writes to a FakeTree as the running kernel would.

    cap_hz: a clock cap the governor obeys without it showing in max_freq (hardware
    clock throttling), so cur_freq can end up below a locked frequency.
    unprivileged: writes as a user other than root (root-only files refuse them).
    log: optional file that receives one "<attr> <value>" line per accepted write.
    """

    def __init__(
        self,
        tree: Any,
        *,
        cap_hz: Optional[int] = None,
        log: Optional[Path] = None,
        unprivileged: bool = False,
    ) -> None:
        self.tree, self.cap_hz, self.log = tree, cap_hz, log
        self.unprivileged = unprivileged
        self.writes: List[Tuple[str, str]] = []
        self.rejected: List[Tuple[str, str]] = []

    def _fail(self, code: int, path: Path, value: str) -> OSError:
        self.rejected.append((path.name, value))
        return OSError(code, os.strerror(code), str(path))

    def write(self, path: Path, value: str) -> None:
        path = Path(path)
        mode = os.stat(path).st_mode
        # sysfs: 0444 attributes refuse everyone; 0644 ones refuse all but root
        if path.name in READ_ONLY_ATTRS or not mode & (0o002 if self.unprivileged else 0o200):
            raise self._fail(errno.EACCES, path, value)
        state = load_state(self.tree.root)
        if path.resolve().parent == self.tree.devfreq and path.name in ("min_freq", "max_freq"):
            self._store_freq(path, value, state)
        elif path.name == "governor":
            if value.strip() not in self.tree.read("available_governors").split():
                raise self._fail(errno.EINVAL, path, value)
            path.write_text(value.strip() + "\n")
        elif path.name == "railgate_enable":
            self._store_railgate(path, value, state)
        else:
            path.write_text(value)
        save_state(self.tree.root, state)
        self.writes.append((path.name, value))
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"{path.name} {value}\n")

    def _store_railgate(self, path: Path, value: str, state: Dict[str, Any]) -> None:
        if value.strip() not in ("0", "1"):
            raise self._fail(errno.EINVAL, path, value)
        path.write_text(value.strip() + "\n")
        if value.strip() == "0" and state.get("late"):  # first power-up registers devfreq
            self.tree.register_devfreq(state)
            state["late"] = False

    def _store_freq(self, path: Path, value: str, state: Dict[str, Any]) -> None:
        try:
            v = int(value.split()[0])
        except (ValueError, IndexError):
            raise self._fail(errno.EINVAL, path, value) from None
        if state["qos"]:
            if path.name == "min_freq":
                state["user_min_khz"] = v // KHZ  # rounded down
            else:  # rounded up; 0: no limit
                state["user_max_khz"] = -(-v // KHZ) if v else None
        else:
            lo, hi = int(self.tree.read("min_freq")), int(self.tree.read("max_freq"))
            if path.name == "min_freq" and v and hi and v > hi:
                raise self._fail(errno.EINVAL, path, value)
            if path.name == "max_freq" and v and lo and v < lo:
                raise self._fail(errno.EINVAL, path, value)
            path.write_text(f"{v}\n")
        refresh(self.tree.devfreq, state, self.cap_hz)
