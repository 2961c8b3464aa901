"""INA3221 rails for the fake trees, in the iio (`ina3221x`, L4T R32 and older) and
hwmon (`ina3221`, R34+) driver layouts.

iio (L4T's drivers/staging/iio/meter/ina3221.c as energymon's ina3221x.c reads it):
<chip>/iio:device<k>/rail_name_<n>, in_power<n>_input (mW), in_voltage<n>_input (mV),
in_current<n>_input (mA), crit/warn_current_limit_<n>; before JetPack 4.2 the folder
is `iio_device`. hwmon (Documentation/hwmon/ina3221.rst): <chip>/hwmon/hwmon<k>/
in<n>_label, in<n>_input (mV), curr<n>_input (mA), in<n+3>_input (shunt, uV),
shunt<n>_resistor (uOhm), curr<n>_crit/max, in<n>_enable, in7 "sum of shunt
voltages", and the chip's `samples` (1) and `update_interval` (7 ms): the driver's
values for the chip's reset configuration (3 channels x 1 sample x 2.2 ms).
Idle readings are illustrative.
"""

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

IDLE = {"POM_5V_IN": (5016, 420), "POM_5V_GPU": (5016, 16), "POM_5V_CPU": (5016, 124),
        "VDD_IN": (5064, 952), "VDD_CPU_GPU_CV": (5064, 180), "VDD_SOC": (5064, 262)}  # fmt: skip


def _put(path: Path, text: str, mode: int = 0o444) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    os.chmod(path, mode)
    return path


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def _iio_chip(tree: Any, chip: Path, folder: str, labels: List[str]) -> None:
    _put(chip / "name", "ina3221x")
    iio = chip / folder
    _put(iio / "name", "ina3221x")
    _put(iio / "running_mode", "1", 0o644)
    for n, label in enumerate(labels):
        mv, ma = IDLE.get(label, (5000, 100))
        _put(iio / f"rail_name_{n}", label)
        files = {
            "voltage": _put(iio / f"in_voltage{n}_input", str(mv)),
            "current": _put(iio / f"in_current{n}_input", str(ma)),
            "power": _put(iio / f"in_power{n}_input", str(mv * ma // 1000)),
        }
        _put(iio / f"crit_current_limit_{n}", "32760", 0o644)
        _put(iio / f"warn_current_limit_{n}", "32760", 0o644)
        tree.rail_files[label] = files


def _hwmon_chip(tree: Any, chip: Path, index: int, labels: List[str]) -> None:
    _put(chip / "name", "ina3221")
    hw = chip / "hwmon" / f"hwmon{index}"
    _put(hw / "name", "ina3221")
    _put(hw / "samples", "1", 0o644)
    _put(hw / "update_interval", "7", 0o644)
    for n, label in enumerate(labels, start=1):
        mv, ma = IDLE.get(label, (5000, 100))
        _put(hw / f"in{n}_label", label)
        _put(hw / f"in{n}_enable", "0" if label == "NC" else "1", 0o644)
        files = {
            "voltage": _put(hw / f"in{n}_input", str(mv)),
            "current": _put(hw / f"curr{n}_input", str(ma)),
        }
        _put(hw / f"in{n + 3}_input", str(ma * 5))  # shunt voltage, uV (5 mOhm shunt)
        _put(hw / f"shunt{n}_resistor", "5000", 0o644)
        for attr, value in (("crit", "5440"), ("max", "5000")):
            _put(hw / f"curr{n}_{attr}", value, 0o644)
            _put(hw / f"curr{n}_{attr}_alarm", "0")
        tree.rail_files[label] = files
    _put(hw / "in7_label", "sum of shunt voltages")
    _put(hw / "in7_input", "6970")
    _link(tree.root / "sys/class/hwmon" / f"hwmon{index}", hw)


def add_rails(
    tree: Any, spec: Dict[str, Any], hwmon_index: int, labels: Optional[Tuple[str, ...]]
) -> None:
    """Every INA3221 of the board; `labels` overrides the first chip's channel labels
    (to test selection by label wherever a rail sits)."""
    for k, chip_spec in enumerate(spec["rails"]):
        chip = tree.root / chip_spec["chip"]
        chip_labels = list(labels) if labels and k == 0 else chip_spec["labels"]
        driver = "ina3221x" if chip_spec["driver"] == "iio" else "ina3221"
        if chip_spec["driver"] == "iio":
            _iio_chip(tree, chip, chip_spec["folder"], chip_labels)
        else:
            _hwmon_chip(tree, chip, hwmon_index + k, chip_labels)
        _link(tree.root / "sys/bus/i2c/drivers" / driver / chip_spec["bus_addr"], chip)
