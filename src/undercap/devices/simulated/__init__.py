"""SIMULATED Jetson devices: the physical model (model.py, constants with sources in
specs/*.toml) behind a Device on a virtual clock (device.py)."""

from undercap.devices.simulated.device import SimulatedDevice, known_names

__all__ = ["SimulatedDevice", "known_names"]
