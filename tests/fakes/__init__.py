"""Test doubles for hardware undercap cannot have in CI: Jetson sysfs trees (sysfs.py)
and the NVML Python module (pynvml.py)."""
