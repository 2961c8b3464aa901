"""Devices by name: `sim:jetson-nano`, `sim:jetson-tx2nx`, `sim:jetson-orin-nano`,
`jetson`, `nvml:<index>`. Backends are imported lazily so that listing devices and
selecting configurations never import torch or vendor libraries they do not need."""

from __future__ import annotations

from pathlib import Path

from undercap.devices.base import Device, DeviceInfo, controlled, locked
from undercap.errors import DeviceError

__all__ = ["Device", "DeviceInfo", "controlled", "locked", "open_device", "simulated_names"]

SPEC_DIR = Path(__file__).with_name("specs")


def simulated_names() -> list[str]:
    """Names of the bundled simulated devices (one spec file each)."""
    return sorted(f"sim:{p.stem}" for p in SPEC_DIR.glob("*.toml"))


def open_device(
    name: str,
    *,
    sysfs_root: str | Path = "/",
    read_only: bool = False,
    allow_clock_control: bool = False,
    seed: int = 0,
) -> Device:
    """Open a device by name. Unknown names raise DeviceError listing the valid ones."""
    if name.startswith("sim:"):
        from undercap.devices.simulated import SimulatedDevice

        return SimulatedDevice.from_name(name[4:], seed=seed, read_only=read_only)
    if name == "jetson":
        from undercap.devices.jetson import JetsonDevice

        return JetsonDevice(sysfs_root=sysfs_root, read_only=read_only)
    if name.startswith("nvml:"):
        from undercap.devices.nvml import NvmlDevice

        index = name[5:]
        if not index.isdigit():
            raise DeviceError(f"bad device {name!r}: use nvml:<index>, e.g. nvml:0")
        return NvmlDevice(int(index), allow_clock_control=allow_clock_control and not read_only)
    valid = ", ".join([*simulated_names(), "jetson", "nvml:<index>"])
    raise DeviceError(f"unknown device {name!r}; known devices: {valid}")
