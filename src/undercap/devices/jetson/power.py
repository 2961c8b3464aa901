"""Jetson board power from the INA3221 monitors, in both driver layouts (the paths per
board and release: docs/guides/jetson-boards.md): the iio driver `ina3221x` (L4T R32
and older, kernel 4.9; `iio_device` before JetPack 4.2) and the hwmon driver `ina3221`
(L4T R34+, kernel 5.10/5.15; power = V x I, Documentation/hwmon/ina3221.rst; its in7,
the sum of shunt voltages, is not a rail); the files' units: Rail.

Rails are selected by label, never by position or hwmon number (those change from boot
to boot); "NC" labels mark unconnected channels. Board power is the module input rail
(`POM_5V_IN` on Nano, `VDD_IN` elsewhere, as jetson-stats uses), else the sum of all
rails (AGX Xavier, AGX Orin). A rail shared by the GPU and other engines (`VDD_CPU_GPU`,
`VDD_CPU_GPU_CV`, `VDD_GPU_SOC`) is reported as combined. Labels per board: energymon's
JetsonPowerRails.md (from the L4T 32.6.1 device trees) and the upstream device trees of
p2888, p3668, p3701, p3767, p3636.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from undercap.devices.jetson.sysfs import read_attr, read_int, read_optional
from undercap.errors import DeviceError

TOTAL_RAILS = ("POM_5V_IN", "VDD_IN")
_NOISE_TOKENS = {"POM", "VDD", "VIN", "SYS"}
_VOLTAGE_TOKEN = re.compile(r"^\d+V\d*[A-Z]*$")  # 5V, 5V0, 1V8, 1V8AO


@dataclass(frozen=True)
class Rail:
    """One INA3221 channel, found by its label."""

    label: str
    layout: str  # "iio" or "hwmon"
    voltage_path: Path  # mV
    current_path: Path  # mA
    power_path: Optional[Path] = None  # mW (iio driver only)

    def read_w(self) -> float:
        if self.power_path is not None:
            return read_int(self.power_path) / 1000.0
        return read_int(self.voltage_path) * read_int(self.current_path) / 1e6

    @property
    def kind(self) -> str:
        return rail_kind(self.label)


def rail_kind(label: str) -> str:
    """'total', 'gpu', 'combined:CPU+GPU+CV'-style, or the rail's own component."""
    if label.upper() in TOTAL_RAILS:
        return "total"
    tokens = [
        t
        for t in label.upper().split("_")
        if t and t not in _NOISE_TOKENS and not _VOLTAGE_TOKEN.match(t)
    ]
    if "GPU" in tokens:
        return "gpu" if tokens == ["GPU"] else "combined:" + "+".join(tokens)
    return "+".join(tokens).lower() or "other"


def _skip(label: str) -> bool:
    return not label or label.upper() == "NC" or "sum of shunt" in label.lower()


def _iio_rails(root: Path) -> List[Rail]:
    rails = []
    base = root / "sys" / "bus" / "i2c" / "drivers" / "ina3221x"
    found = base.glob("*/iio:device*/rail_name_*")
    for name_file in sorted([*found, *base.glob("*/iio_device/rail_name_*")]):
        n = name_file.name.rsplit("_", 1)[-1]
        label = read_attr(name_file)
        if _skip(label) or not n.isdigit():
            continue
        d = name_file.parent
        power = d / f"in_power{n}_input"
        voltage, current = d / f"in_voltage{n}_input", d / f"in_current{n}_input"
        rails.append(Rail(label, "iio", voltage, current, power if power.is_file() else None))
    return rails


def _hwmon_rails(root: Path) -> List[Rail]:
    rails = []
    base = root / "sys" / "bus" / "i2c" / "drivers" / "ina3221"
    for label_file in sorted(base.glob("*/hwmon/hwmon*/in[123]_label")):
        n = label_file.name[2]
        label = read_attr(label_file)
        d = label_file.parent
        enable = d / f"in{n}_enable"
        if _skip(label) or (enable.is_file() and read_attr(enable) == "0"):
            continue
        rails.append(Rail(label, "hwmon", d / f"in{n}_input", d / f"curr{n}_input"))
    return rails


def find_rails(root: Union[str, Path] = "/") -> List[Rail]:
    """Every labelled INA3221 rail under <root>, iio and hwmon layouts."""
    seen: Dict[str, Rail] = {}
    for rail in _iio_rails(Path(root)) + _hwmon_rails(Path(root)):
        seen.setdefault(rail.label, rail)
    return list(seen.values())


class PowerRails:
    """Board and GPU power from the rails found on a board."""

    def __init__(self, rails: List[Rail], root: Path) -> None:
        self.rails = rails
        self.root = root
        by_label = {r.label.upper(): r for r in rails}
        self.total = next((by_label[t] for t in TOTAL_RAILS if t in by_label), None)
        self.gpu = next((r for r in rails if r.kind == "gpu"), None)
        self.gpu_combined = next((r for r in rails if r.kind.startswith("combined:")), None)

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(r.label for r in self.rails)

    def board_power_w(self) -> float:
        """Module input power, else the sum of every rail."""
        if not self.rails:
            raise DeviceError(
                f"no INA3221 power rails under {self.root}/sys/bus/i2c/drivers/ina3221x or "
                "ina3221: power cannot be measured; check that the ina3221 driver is loaded"
            )
        if self.total is not None:
            return self.total.read_w()
        return sum(r.read_w() for r in self.rails)

    def conversion(self) -> Dict[str, Optional[str]]:
        """The board rail's hwmon `samples` and `update_interval` (ms), as read."""
        rail = self.total or (self.rails[0] if self.rails else None)
        folder = None if rail is None or rail.layout != "hwmon" else rail.voltage_path.parent
        return {
            name: None if folder is None else read_optional(folder / name)
            for name in ("samples", "update_interval")
        }

    def describe(self) -> Dict[str, object]:
        total = self.total.label if self.total else ("sum of rails" if self.rails else None)
        combined = self.gpu_combined
        return {
            "conversion": self.conversion(),
            "rails": {r.label: r.kind for r in self.rails},
            "layout": sorted({r.layout for r in self.rails}),
            "total_rail": total,
            "gpu_rail": self.gpu.label if self.gpu else None,
            "gpu_combined_rail": f"{combined.label} ({combined.kind[9:]})" if combined else None,
        }
