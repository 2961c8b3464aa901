"""How the GPU's devfreq `min_freq`/`max_freq` behave, by kernel generation, and what
undercap saves so that restoring puts back what was there (docs/guides/jetson-boards.md).

* Linux 4.9 (L4T R32, JetPack 4): the value written is stored and read back; min above
  max is rejected with EINVAL (drivers/devfreq/devfreq.c). Saving the values read and
  writing them back restores exactly.
* Linux 5.10 / 5.15 (L4T R35 / R36), since devfreq moved to PM QoS (Linux 5.5): writes
  are the user's min/max *requests* (Hz rounded down / up to kHz; max 0: no limit; min
  above max accepted); a read shows the effective range, narrowed by every request (the
  user's, a thermal cooling device's) and clamped to min <= max (get_freq_range).
  Writing back what was read would install requests nobody made, and nvpmodel's cap is
  a user request too, which a lock replaces.

So on 5.x undercap saves *requests*: no minimum request where the effective minimum
is the table's lowest step (restored by writing 0), and for the maximum the request
nvpmodel made for the active mode (its ceiling on the table), unless the effective
maximum is above it (someone raised it: that value); with no mode known, the
effective maximum (0 where it is the table's top).
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from undercap.devices.jetson.nvpmodel import ModeRange
from undercap.devices.jetson.sysfs import kernel_release, l4t_release

#: devfreq's sysfs limits became PM QoS requests in Linux 5.5
QOS_SINCE = (5, 5)


@dataclass(frozen=True)
class DevfreqRules:
    """Which semantics the kernel's min_freq/max_freq files follow."""

    qos: bool  # True: 5.x PM QoS requests; False: 4.9 stored values
    kernel: Optional[str]  # e.g. "5.15.136-tegra"
    basis: str  # how undercap decided

    @property
    def label(self) -> str:
        kind = "PM QoS requests (Linux >= 5.5)" if self.qos else "stored values (Linux 4.9)"
        return f"{kind}; {self.basis}"


def devfreq_rules(root: Path) -> DevfreqRules:
    """From /proc/sys/kernel/osrelease, else the L4T release (R32: 4.9, R34+: 5.10 or
    later), else the 4.9 rules: on a 5.x kernel they only install explicit requests,
    while 5.x rules on a 4.9 kernel would write 0 where a value was."""
    release = kernel_release(root)
    m = re.match(r"(\d+)\.(\d+)", release or "")
    if m:
        version = (int(m.group(1)), int(m.group(2)))
        return DevfreqRules(version >= QOS_SINCE, release, f"kernel {release}")
    l4t = l4t_release(root) or ""
    m = re.match(r"R(\d+)", l4t)
    if m:
        return DevfreqRules(int(m.group(1)) >= 34, None, f"L4T {l4t} (no osrelease)")
    return DevfreqRules(False, None, "kernel unknown: assumed Linux 4.9")


def max_request_hz(
    table: Sequence[int], effective_max_hz: int, mode: Optional[ModeRange], mode_known: bool
) -> int:
    """The maximum request behind an effective maximum (5.x); 0 means none."""
    request = effective_max_hz
    if mode_known and mode is not None:  # the mode's cap, unless raised above it by hand
        request = max(mode.ceiling_hz, effective_max_hz)
    return 0 if request >= table[-1] else request


def saved_limits(
    rules: DevfreqRules,
    table: Sequence[int],
    effective: Tuple[int, int],
    mode: Optional[ModeRange],
    mode_known: bool,
) -> Dict[str, Any]:
    """The limit fields of a saved state: the effective range as read, plus on 5.x
    kernels the requests to write back."""
    lo, hi = effective
    state: Dict[str, Any] = {"min_freq_hz": lo, "max_freq_hz": hi, "pm_qos": rules.qos}
    if rules.qos:
        state["min_request_hz"] = 0 if lo <= table[0] else lo  # none at the lowest step
        state["max_request_hz"] = max_request_hz(table, hi, mode, mode_known)
    return state
