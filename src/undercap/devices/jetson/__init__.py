"""The Jetson backend: GPU clocks through sysfs devfreq (sysfs.py), power from the
INA3221 rails (power.py), the device itself in device.py."""

from undercap.devices.jetson.device import JetsonDevice

__all__ = ["JetsonDevice"]
