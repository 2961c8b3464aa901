"""GPU devices: one small interface (base.py), backends by name (factory.py), the
power sampler (sampler.py) and crash-safe restoration of settings (state.py).

Backends: `simulated/` (a documented physical model of Jetson boards), `jetson/`
(sysfs devfreq + INA3221 rails) and `nvml.py` (NVIDIA GPUs, read-only by default).
Only a backend module imports its vendor library.
"""

from undercap.devices.base import Device, DeviceInfo, controlled, locked
from undercap.devices.factory import (
    discover,
    open_device,
    reopen,
    replay,
    simulated_names,
    state_files,
)

__all__ = [
    "Device",
    "DeviceInfo",
    "controlled",
    "discover",
    "locked",
    "open_device",
    "reopen",
    "replay",
    "simulated_names",
    "state_files",
]
