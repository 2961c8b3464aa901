"""Fake Jetson filesystem trees, laid out as L4T lays them out, plus a fake kernel.

Builders:
* `build_nano(root)`: Jetson Nano on L4T R32.7 (kernel 4.9): GPU devfreq node
  /sys/devices/57000000.gpu/devfreq/57000000.gpu, railgate at
  /sys/devices/57000000.gpu/railgate_enable (paths as in jetson_clocks for tegra210),
  INA3221 through the iio driver at /sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0
  (rail_name_0..2 = POM_5V_IN, POM_5V_GPU, POM_5V_CPU; in_power/in_voltage/in_current),
  nvpmodel modes MAXN (0, no GPU cap) and 5W (1, GPU MAX_FREQ 640000000) as in
  nvpmodel_t210_jetson-nano.conf, and the 12-step GPU table 76.8 ... 921.6 MHz.
* `build_orin_nano(root, release="r36")`: Jetson Orin Nano (Super) on L4T R36
  (JetPack 6): GPU node /sys/devices/platform/bus@0/17000000.gpu (release "r35":
  /sys/devices/17000000.ga10b, JetPack 5), other engines' devfreq nodes (vic, nvdec)
  beside it, INA3221 through the hwmon driver at
  /sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon<k> (in1..3_label = VDD_IN,
  VDD_CPU_GPU_CV, VDD_SOC; in7 = sum of shunt voltages), nvpmodel modes 15W, 25W,
  MAXN_SUPER, 7W. The GPU table uses the ga10b's 102 MHz steps up to 1020 MHz; the
  per-mode GPU caps are illustrative values in that table.

As in the kernel, /sys/class/devfreq/<node>, the i2c driver entries and `device` /
`of_node` are relative symlinks into /sys/devices and /sys/firmware; attribute modes
follow sysfs (0444 read-only, 0644 root-writable).

Plain files cannot run the kernel's store handlers, so `FakeKernel.write` is passed
to the backend as its writer: it rejects what the kernel rejects (devfreq min_freq >
max_freq is EINVAL in Linux 4.9, drivers/devfreq/devfreq.c; read-only attributes are
EACCES), updates cur_freq as devfreq would, and logs every write.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

NANO_FREQS_HZ = (
    76800000, 153600000, 230400000, 307200000, 384000000, 460800000,
    537600000, 614400000, 691200000, 768000000, 844800000, 921600000,
)  # fmt: skip
# Orin Nano 8GB, L4T R35 (JetPack 5): ga10b steps of 102 MHz from 306 MHz, capped at the
# module's 624.75 MHz. Orin Nano "Super" on L4T R36.4 (JetPack 6.2): up to 1020 MHz.
ORIN_NANO_FREQS_HZ = (306000000, 408000000, 510000000, 612000000, 624750000)
ORIN_NANO_SUPER_FREQS_HZ = (
    306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000, 1020000000,
)  # fmt: skip

NANO_GOVERNORS = "wmark_active wmark_simple nvhost_podgov userspace performance simple_ondemand"
READ_ONLY_ATTRS = frozenset(
    {"cur_freq", "available_frequencies", "available_governors", "target_freq", "trans_stat"}
)

NANO_NVPMODEL_CONF = """\
# Power model definitions for Jetson Nano (layout of nvpmodel_t210_jetson-nano.conf)
< PARAM TYPE=FILE NAME=CPU_ONLINE >
CORE_0 /sys/devices/system/cpu/cpu0/online
CORE_1 /sys/devices/system/cpu/cpu1/online
CORE_2 /sys/devices/system/cpu/cpu2/online
CORE_3 /sys/devices/system/cpu/cpu3/online

< PARAM TYPE=CLOCK NAME=GPU >
FREQ_TABLE /sys/devices/gpu.0/devfreq/57000000.gpu/available_frequencies
MAX_FREQ /sys/devices/gpu.0/devfreq/57000000.gpu/max_freq
MIN_FREQ /sys/devices/gpu.0/devfreq/57000000.gpu/min_freq

# MAXN is the NONE power model to release all constraints
< POWER_MODEL ID=0 NAME=MAXN >
CPU_ONLINE CORE_0 1
CPU_ONLINE CORE_1 1
CPU_ONLINE CORE_2 1
CPU_ONLINE CORE_3 1
CPU_A57 MIN_FREQ  0
CPU_A57 MAX_FREQ -1
GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on
GPU MIN_FREQ  0
GPU MAX_FREQ -1
GPU_POWER_CONTROL_DISABLE GPU_PWR_CNTL_DIS auto
EMC MAX_FREQ 0

< POWER_MODEL ID=1 NAME=5W >
CPU_ONLINE CORE_0 1
CPU_ONLINE CORE_1 1
CPU_ONLINE CORE_2 0
CPU_ONLINE CORE_3 0
CPU_A57 MIN_FREQ  0
CPU_A57 MAX_FREQ 918000
GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on
GPU MIN_FREQ 0
GPU MAX_FREQ 640000000
GPU_POWER_CONTROL_DISABLE GPU_PWR_CNTL_DIS auto
EMC MAX_FREQ 1600000000

# mandatory section to configure the default mode
< PM_CONFIG DEFAULT=0 >
"""

ORIN_R35_NVPMODEL_CONF = """\
< PARAM TYPE=CLOCK NAME=GPU >
FREQ_TABLE /sys/devices/17000000.ga10b/devfreq/17000000.ga10b/available_frequencies
MAX_FREQ /sys/devices/17000000.ga10b/devfreq/17000000.ga10b/max_freq
MIN_FREQ /sys/devices/17000000.ga10b/devfreq/17000000.ga10b/min_freq

< POWER_MODEL ID=0 NAME=15W >
CPU_ONLINE CORE_0 1
GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on
GPU MIN_FREQ 0
GPU MAX_FREQ -1
GPU_POWER_CONTROL_DISABLE GPU_PWR_CNTL_DIS auto

< POWER_MODEL ID=1 NAME=7W >
CPU_ONLINE CORE_0 1
GPU MIN_FREQ 0
GPU MAX_FREQ 408000000

< PM_CONFIG DEFAULT=0 >
"""

ORIN_NVPMODEL_CONF = """\
< PARAM TYPE=CLOCK NAME=GPU >
FREQ_TABLE /sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu/available_frequencies
MAX_FREQ /sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu/max_freq
MIN_FREQ /sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu/min_freq

< POWER_MODEL ID=0 NAME=15W >
CPU_ONLINE CORE_0 1
TPC_POWER_GATING TPC_PG_MASK 0
GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on
GPU MIN_FREQ 0
GPU MAX_FREQ 612000000
GPU_POWER_CONTROL_DISABLE GPU_PWR_CNTL_DIS auto
EMC MAX_FREQ 0

< POWER_MODEL ID=1 NAME=25W >
GPU MIN_FREQ 0
GPU MAX_FREQ 918000000

< POWER_MODEL ID=2 NAME=MAXN_SUPER >
GPU MIN_FREQ 0
GPU MAX_FREQ -1

< POWER_MODEL ID=3 NAME=7W >
GPU MIN_FREQ 0
GPU MAX_FREQ 408000000

< PM_CONFIG DEFAULT=2 >
"""


def _put(path: Path, text: str, mode: int = 0o444) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith(("\n", "\0")) else text + "\n")
    os.chmod(path, mode)
    return path


def _link(link: Path, target: Path) -> None:
    """A relative symlink, as sysfs makes them (absolute ones would escape the tree)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


@dataclass
class FakeTree:
    """A built tree: where things are, and helpers to change sensor readings."""

    root: Path
    devfreq: Path  # real folder of the GPU devfreq node
    node: str
    railgate: Path | None
    rail_files: dict[str, dict[str, Path]] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path, node: str) -> FakeTree:
        """Re-open a tree built earlier (e.g. from a subprocess)."""
        devfreq = (root / "sys/class/devfreq" / node).resolve()
        railgate = (root / "sys/class/devfreq" / node / "device" / "railgate_enable").resolve()
        return cls(root, devfreq, node, railgate if railgate.is_file() else None)

    def read(self, attr: str) -> str:
        return (self.devfreq / attr).read_text().strip()

    def settings(self) -> dict[str, str | None]:
        """The four settings undercap saves and restores."""
        return {
            "min_freq": self.read("min_freq"),
            "max_freq": self.read("max_freq"),
            "governor": self.read("governor"),
            "railgate_enable": self.railgate.read_text().strip() if self.railgate else None,
        }

    def set_rail(self, label: str, mv: int, ma: int) -> None:
        files = self.rail_files[label]
        files["voltage"].write_text(f"{mv}\n")
        files["current"].write_text(f"{ma}\n")
        if "power" in files:  # the iio driver computes power itself (mW)
            files["power"].write_text(f"{mv * ma // 1000}\n")


def _devfreq(root: Path, dev: Path, node: str, table: tuple[int, ...], gov: str, cur: int,
             max_hz: int) -> Path:  # fmt: skip
    d = dev / "devfreq" / node
    _put(d / "available_frequencies", " ".join(str(f) for f in table))
    _put(d / "available_governors", NANO_GOVERNORS)
    _put(d / "governor", gov, 0o644)
    _put(d / "cur_freq", str(cur))
    _put(d / "target_freq", str(cur))
    _put(d / "min_freq", str(table[0]), 0o644)
    _put(d / "max_freq", str(max_hz), 0o644)
    _put(d / "polling_interval", "50", 0o644)
    _link(d / "device", dev)
    _link(root / "sys/class/devfreq" / node, d)
    return d


def _of_node(root: Path, dev: Path, dt_path: str, name: str, compatible: list[str]) -> None:
    base = root / "sys/firmware/devicetree/base" / dt_path
    _put(base / "name", name + "\0")
    _put(base / "compatible", "".join(c + "\0" for c in compatible))
    _link(dev / "of_node", base)


def _board(root: Path, model: str, l4t: str, mem_kb: int, conf_name: str, conf: str,
           pmode: int | None) -> None:  # fmt: skip
    _put(root / "proc/device-tree/model", model + "\0")
    _put(
        root / "proc/meminfo", f"MemTotal:        {mem_kb} kB\nMemFree:         {mem_kb // 2} kB\n"
    )
    _put(root / "proc/sys/kernel/random/boot_id", "3f1c5a2e-8d7b-4e1f-9a0c-5b6d7e8f9a01")
    _put(root / "etc/nv_tegra_release", l4t)
    _put(root / "etc/nvpmodel" / conf_name, conf, 0o644)
    _link(root / "etc/nvpmodel.conf", root / "etc/nvpmodel" / conf_name)
    if pmode is not None:
        _put(root / "var/lib/nvpmodel/status", f"pmode:{pmode:04d} fmode:quiet", 0o644)


def build_nano(root: Path, *, nvpmodel_mode: int | None = 0, rails: bool = True) -> FakeTree:
    """Jetson Nano Developer Kit, L4T R32.7.1, iio INA3221 layout."""
    root = Path(root)
    dev = root / "sys/devices/57000000.gpu"
    max_hz = NANO_FREQS_HZ[-1] if nvpmodel_mode != 1 else 640000000  # nvpmodel 5W writes 640 MHz
    d = _devfreq(
        root, dev, "57000000.gpu", NANO_FREQS_HZ, "nvhost_podgov", NANO_FREQS_HZ[0], max_hz
    )
    railgate = _put(dev / "railgate_enable", "1", 0o644)
    _of_node(root, dev, "gpu@57000000", "gpu", ["nvidia,tegra210-gm20b", "nvidia,gm20b"])
    _board(
        root,
        "NVIDIA Jetson Nano Developer Kit",
        "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64, "
        "DATE: Sat Feb 19 17:05:08 UTC 2022",
        4059272,
        "nvpmodel_t210_jetson-nano.conf",
        NANO_NVPMODEL_CONF,
        nvpmodel_mode,
    )
    tree = FakeTree(root, d, "57000000.gpu", railgate)
    if rails:
        _nano_ina3221(tree)
    return tree


def _nano_ina3221(tree: FakeTree) -> None:
    chip = tree.root / "sys/devices/7000c400.i2c/i2c-6/6-0040"
    _put(chip / "name", "ina3221x")
    iio = chip / "iio:device0"
    _put(iio / "name", "ina3221x")
    _put(iio / "running_mode", "1", 0o644)
    idle = {"POM_5V_IN": (5016, 420), "POM_5V_GPU": (5016, 16), "POM_5V_CPU": (5016, 124)}
    for n, (label, (mv, ma)) in enumerate(idle.items()):
        _put(iio / f"rail_name_{n}", label)
        files = {
            "voltage": _put(iio / f"in_voltage{n}_input", str(mv)),
            "current": _put(iio / f"in_current{n}_input", str(ma)),
            "power": _put(iio / f"in_power{n}_input", str(mv * ma // 1000)),
        }
        _put(iio / f"crit_current_limit_{n}", "32760", 0o644)
        _put(iio / f"warn_current_limit_{n}", "32760", 0o644)
        tree.rail_files[label] = files
    _link(tree.root / "sys/bus/i2c/drivers/ina3221x/6-0040", chip)


def build_orin_nano(
    root: Path,
    *,
    release: str = "r36",
    nvpmodel_mode: int | None = None,
    hwmon_index: int = 3,
    labels: tuple[str, str, str] = ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"),
    rails: bool = True,
) -> FakeTree:
    """Jetson Orin Nano Developer Kit, hwmon INA3221 layout.

    release "r36": Orin Nano Super on L4T R36.4 (JetPack 6.2), GPU node 17000000.gpu
    under platform/bus@0, modes 15W/25W/MAXN_SUPER/7W (default MAXN_SUPER = 2).
    release "r35": Orin Nano 8GB on L4T R35.4 (JetPack 5), GPU node 17000000.ga10b,
    modes 15W/7W (default 15W = 0).
    """
    root = Path(root)
    if release == "r36":
        node, dev, of_name = "17000000.gpu", root / "sys/devices/platform/bus@0/17000000.gpu", "gpu"
        l4t = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64"
        table, conf, conf_name = ORIN_NANO_SUPER_FREQS_HZ, ORIN_NVPMODEL_CONF, "p3767_0003_super"
        caps, mode = {0: 612000000, 1: 918000000, 3: 408000000}, 2
    else:
        node, dev, of_name = "17000000.ga10b", root / "sys/devices/17000000.ga10b", "ga10b"
        l4t = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64"
        table, conf, conf_name = ORIN_NANO_FREQS_HZ, ORIN_R35_NVPMODEL_CONF, "p3767_0003"
        caps, mode = {1: 408000000}, 0
    mode = mode if nvpmodel_mode is None else nvpmodel_mode
    d = _devfreq(root, dev, node, table, "nvhost_podgov", table[0], caps.get(mode, table[-1]))
    railgate = _put(dev / "railgate_enable", "1", 0o644)
    _of_node(root, dev, "bus@0/gpu@17000000", of_name, ["nvidia,ga10b"])
    # other engines have devfreq nodes too; discovery must pick the GPU
    host1x = root / "sys/devices/platform/bus@0/13e00000.host1x"
    for engine, name in (("15340000.vic", "vic"), ("15480000.nvdec", "nvdec")):
        edev = host1x / engine
        vic_table = (115200000, 345600000, 729600000)
        _devfreq(root, edev, engine, vic_table, "nvhost_podgov", vic_table[0], vic_table[-1])
        dt = f"bus@0/host1x@13e00000/{name}@{engine[:8]}"
        _of_node(root, edev, dt, name, [f"nvidia,tegra234-{name}"])
    model = "NVIDIA Jetson Orin Nano Developer Kit"
    _board(root, model, l4t, 7620440, f"nvpmodel_{conf_name}.conf", conf, mode)
    tree = FakeTree(root, d, node, railgate)
    if rails:
        _orin_ina3221(tree, hwmon_index, labels)
    return tree


def _orin_ina3221(tree: FakeTree, hwmon_index: int, labels: tuple[str, str, str]) -> None:
    chip = tree.root / "sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040"
    _put(chip / "name", "ina3221")
    hw = chip / "hwmon" / f"hwmon{hwmon_index}"
    _put(hw / "name", "ina3221")
    _put(hw / "samples", "512", 0o644)
    _put(hw / "update_interval", "1", 0o644)
    idle = {"VDD_IN": (5064, 952), "VDD_CPU_GPU_CV": (5064, 180), "VDD_SOC": (5064, 262)}
    for n, label in enumerate(labels, start=1):
        mv, ma = idle.get(label, (5000, 100))
        _put(hw / f"in{n}_label", label)
        _put(hw / f"in{n}_enable", "1", 0o644)
        files = {
            "voltage": _put(hw / f"in{n}_input", str(mv)),
            "current": _put(hw / f"curr{n}_input", str(ma)),
        }
        _put(hw / f"in{n + 3}_input", str(ma * 5))  # shunt voltage, uV (5 mOhm shunt)
        _put(hw / f"shunt{n}_resistor", "5000", 0o644)
        _put(hw / f"curr{n}_crit", "5440", 0o644)
        _put(hw / f"curr{n}_max", "5000", 0o644)
        _put(hw / f"curr{n}_crit_alarm", "0")
        _put(hw / f"curr{n}_max_alarm", "0")
        tree.rail_files[label] = files
    _put(hw / "in7_label", "sum of shunt voltages")
    _put(hw / "in7_input", "6970")
    _link(tree.root / "sys/class/hwmon" / f"hwmon{hwmon_index}", hw)
    _link(tree.root / "sys/bus/i2c/drivers/ina3221/1-0040", chip)


class FakeKernel:
    """The kernel side of sysfs writes for a fake tree.

    cap_hz: a clock cap the governor obeys (thermal or power-mode capping), so that
    cur_freq can end up below a locked frequency, as on a throttled board.
    unprivileged: writes as a user other than root (root-only files refuse them).
    log: optional file that receives one "<attr> <value>" line per accepted write
    (for a parent process checking a child's writes).
    """

    def __init__(
        self,
        tree: FakeTree,
        *,
        cap_hz: int | None = None,
        log: Path | None = None,
        unprivileged: bool = False,
    ) -> None:
        self.tree, self.cap_hz, self.log = tree, cap_hz, log
        self.unprivileged = unprivileged
        self.writes: list[tuple[str, str]] = []
        self.rejected: list[tuple[str, str]] = []
        self.table = tuple(int(x) for x in tree.read("available_frequencies").split())

    def _fail(self, code: int, path: Path, value: str) -> OSError:
        self.rejected.append((path.name, value))
        return OSError(code, os.strerror(code), str(path))

    def write(self, path: Path, value: str) -> None:
        path = Path(path)
        mode = os.stat(path).st_mode
        # sysfs: 0444 attributes refuse everyone; 0644 ones refuse all but root
        if path.name in READ_ONLY_ATTRS or not mode & (0o002 if self.unprivileged else 0o200):
            raise self._fail(errno.EACCES, path, value)
        if path.parent == self.tree.devfreq and path.name in ("min_freq", "max_freq"):
            self._store_freq(path, value)
        elif path.name == "governor":
            if value.strip() not in self.tree.read("available_governors").split():
                raise self._fail(errno.EINVAL, path, value)
            path.write_text(value.strip() + "\n")
        elif path.name == "railgate_enable":
            if value.strip() not in ("0", "1"):
                raise self._fail(errno.EINVAL, path, value)
            path.write_text(value.strip() + "\n")
        else:
            path.write_text(value)
        self.writes.append((path.name, value))
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"{path.name} {value}\n")

    def _store_freq(self, path: Path, value: str) -> None:
        """min_freq_store / max_freq_store of Linux 4.9 devfreq."""
        try:
            v = int(value.split()[0])
        except (ValueError, IndexError):
            raise self._fail(errno.EINVAL, path, value) from None
        lo, hi = int(self.tree.read("min_freq")), int(self.tree.read("max_freq"))
        if path.name == "min_freq" and v and hi and v > hi:
            raise self._fail(errno.EINVAL, path, value)
        if path.name == "max_freq" and v and lo and v < lo:
            raise self._fail(errno.EINVAL, path, value)
        path.write_text(f"{v}\n")
        self._update_cur()

    def _update_cur(self) -> None:
        """The governor under load runs at the highest step the limits allow."""
        hi = int(self.tree.read("max_freq"))
        if self.cap_hz is not None:
            hi = min(hi, self.cap_hz)
        allowed = [f for f in self.table if f <= hi]
        cur = max(allowed) if allowed else self.table[0]
        for attr in ("cur_freq", "target_freq"):
            p = self.tree.devfreq / attr
            os.chmod(p, 0o644)
            p.write_text(f"{cur}\n")
            os.chmod(p, 0o444)
