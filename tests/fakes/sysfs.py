"""Fake Jetson filesystem trees, laid out as each L4T release lays them out.

Every builder cites its public source; what no source shows is marked "illustrative".
Shared sources: NVIDIA's jetson_clocks (R32: /sys/devices/<gpu>/devfreq/<gpu> and
<gpu>/railgate_enable; R36: /sys/devices/platform/gpu.0 found by of_node/compatible,
registered with devfreq at first power-up); nvgpu os/linux/sysfs.c (the `gpu.0` link
beside the GPU device, and on kernels after 4.14 also in /sys/devices) and scale.c
(the `devfreq_dev` link); OE4T/meta-tegra issue 1613 (R36.3 AGX Orin:
/sys/devices/platform/17000000.gpu/devfreq_dev missing until the GPU powers up);
jetson_stats tests/nvpmodel and tests/jetson_clocks (nvpmodel confs of Nano, AGX Xavier,
AGX Orin; TX2 MAXP_CORE_ARM at MaxFreq=1134750000); energymon's JetsonPowerRails.md
(INA3221 rail labels per board, from the L4T 32.6.1 device trees); Linux
Documentation/hwmon/ina3221.rst (hwmon files; `samples` and `update_interval` are
the driver's defaults for the chip's reset configuration: 1 sample, 1.1 ms bus +
1.1 ms shunt conversion, 3 channels -> 6.6 ms, shown rounded as 7).

As in the kernel, /sys/class/devfreq/<node>, the i2c driver entries, `device`,
`of_node`, `gpu.0` and `devfreq_dev` are relative symlinks; attribute modes follow
sysfs (0444 read-only, 0644 root-writable). Writes go through fakes.kernel.FakeKernel.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from fakes.boards import BOARDS, NANO_FREQS_HZ, ORIN_NANO_FREQS_HZ, ORIN_NANO_SUPER_FREQS_HZ
from fakes.kernel import FakeKernel, load_state, refresh, save_state

__all__ = [
    "BOARDS", "NANO_FREQS_HZ", "ORIN_NANO_FREQS_HZ", "ORIN_NANO_SUPER_FREQS_HZ",
    "FakeKernel", "FakeTree", "build_board", "build_nano", "build_orin_nano", "build_thor",
]  # fmt: skip

GOVERNORS = "wmark_active wmark_simple nvhost_podgov userspace performance simple_ondemand"


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
    devfreq: Path  # real folder of the GPU devfreq node (absent until a late GPU wakes)
    node: str
    railgate: Optional[Path]
    rail_files: Dict[str, Dict[str, Path]] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path, node: str) -> "FakeTree":
        """Re-open a tree built earlier (e.g. from a subprocess)."""
        devfreq = (root / "sys/class/devfreq" / node).resolve()
        railgate = (root / "sys/class/devfreq" / node / "device" / "railgate_enable").resolve()
        return cls(root, devfreq, node, railgate if railgate.is_file() else None)

    def read(self, attr: str) -> str:
        return (self.devfreq / attr).read_text().strip()

    def settings(self) -> Dict[str, Optional[str]]:
        """The four settings undercap saves and restores."""
        return {
            "min_freq": self.read("min_freq"),
            "max_freq": self.read("max_freq"),
            "governor": self.read("governor"),
            "railgate_enable": self.railgate.read_text().strip() if self.railgate else None,
        }

    def snapshot(self) -> Dict[str, str]:
        """Every file of the GPU's devfreq node, its railgate_enable and the kernel's
        requests: what a lock/restore round trip must leave as it was. cur_freq and
        target_freq are left out: they are the governor's reading of the moment (idle
        before a run, wherever the load left it after), not settings."""
        files = {
            p.name: p.read_text()
            for p in sorted(self.devfreq.iterdir())
            if p.is_file() and p.name not in ("cur_freq", "target_freq")
        }
        if self.railgate is not None:
            files["railgate_enable"] = self.railgate.read_text()
        state = load_state(self.root)
        for key in ("user_min_khz", "user_max_khz", "thermal_max_khz"):
            files[f"kernel:{key}"] = str(state.get(key))
        return files

    def set_thermal_cap(self, hz: Optional[int]) -> None:
        """A thermal cooling device's max request (5.x) or clock cap (4.9: cur only)."""
        state = load_state(self.root)
        state["thermal_max_khz"] = None if hz is None else hz // 1000
        save_state(self.root, state)
        refresh(self.devfreq, state)

    def register_devfreq(self, state: Dict[str, Any]) -> None:
        """nvgpu's gk20a_scale_init at the GPU's first power-up (late GPU, R36)."""
        _devfreq_node(self.root, self.devfreq.parent.parent, self.node, state)

    def set_rail(self, label: str, mv: int, ma: int) -> None:
        files = self.rail_files[label]
        files["voltage"].write_text(f"{mv}\n")
        files["current"].write_text(f"{ma}\n")
        if "power" in files:  # the iio driver computes power itself (mW)
            files["power"].write_text(f"{mv * ma // 1000}\n")


def _devfreq_node(root: Path, dev: Path, node: str, state: Dict[str, Any]) -> Path:
    table = state["table"]
    d = dev / "devfreq" / node
    _put(d / "available_frequencies", " ".join(str(f) for f in table))
    _put(d / "available_governors", GOVERNORS)
    _put(d / "governor", "nvhost_podgov", 0o644)
    for attr in ("cur_freq", "target_freq"):
        _put(d / attr, str(table[0]))
    _put(d / "min_freq", str(state.pop("boot_min_hz", table[0])), 0o644)
    _put(d / "max_freq", str(state.pop("boot_max_hz", table[-1])), 0o644)
    _put(d / "polling_interval", "50", 0o644)
    _link(d / "device", dev)
    _link(root / "sys/class/devfreq" / node, d)
    if state["qos"]:  # nvgpu links it from the GPU device (scale.c, 5.x kernels)
        _link(dev / "devfreq_dev", d)
    refresh(d, state, idle=True)
    return d


def _of_node(root: Path, dev: Path, dt_path: str, name: str, compatible: List[str]) -> None:
    base = root / "sys/firmware/devicetree/base" / dt_path
    _put(base / "name", name + "\0")
    _put(base / "compatible", "".join(c + "\0" for c in compatible))
    _link(dev / "of_node", base)


def _gpu(root: Path, spec: Dict[str, Any], state: Dict[str, Any], late: bool) -> FakeTree:
    dev = root / spec["gpu_dev"]
    node = spec["node"]
    railgate = _put(dev / "railgate_enable", "1", 0o644)
    _of_node(root, dev, spec["dt_path"], spec["of_name"], spec["compatible"])
    for link in spec["gpu_links"]:  # nvgpu's gpu.0 (and <name>) links
        _link(root / link, dev)
    tree = FakeTree(root, dev / "devfreq" / node, node, railgate)
    if not late:
        _devfreq_node(root, dev, node, state)
    for name, addr in spec.get("engines", ()):  # other devfreq engines beside the GPU
        edev = root / spec["host1x"] / f"{addr}.{name}"
        engine = {**state, "table": [115200000, 345600000, 729600000], "late": False}
        engine.update(
            user_min_khz=0, user_max_khz=None, boot_min_hz=115200000, boot_max_hz=729600000
        )
        _devfreq_node(root, edev, f"{addr}.{name}", engine)
        _of_node(root, edev, f"host1x/{name}@{addr}", name, [f"nvidia,tegra234-{name}"])
    return tree


def _board_files(root: Path, spec: Dict[str, Any], mode: Optional[int]) -> None:
    _put(root / "proc/device-tree/model", spec["model"] + "\0")
    mem_kb = spec["mem_kb"]
    _put(root / "proc/meminfo", f"MemTotal:        {mem_kb} kB\nMemFree:    {mem_kb // 2} kB")
    _put(root / "proc/sys/kernel/random/boot_id", "3f1c5a2e-8d7b-4e1f-9a0c-5b6d7e8f9a01")
    _put(root / "proc/sys/kernel/osrelease", spec["kernel"])
    _put(root / "etc/nv_tegra_release", spec["l4t"])
    if spec.get("conf"):
        _put(root / "etc/nvpmodel" / spec["conf_name"], spec["conf"], 0o644)
        _link(root / "etc/nvpmodel.conf", root / "etc/nvpmodel" / spec["conf_name"])
    if mode is not None:
        _put(root / "var/lib/nvpmodel/status", f"pmode:{mode:04d} fmode:quiet", 0o644)


def _boot_state(spec: Dict[str, Any], mode: Optional[int]) -> Dict[str, Any]:
    """The kernel's state after nvpmodel applied `mode` at boot."""
    table = list(spec["table"])
    qos = not spec["kernel"].startswith(("4.", "3."))
    applied_max, floor = spec.get("applied", {}).get(mode, (None, None))
    state: Dict[str, Any] = {"qos": qos, "table": table, "thermal_max_khz": None}
    state["user_min_khz"] = (floor or 0) // 1000 if qos else 0
    state["user_max_khz"] = -(-applied_max // 1000) if qos and applied_max else None
    if not qos:  # 4.9 shows what nvpmodel wrote
        state["boot_min_hz"], state["boot_max_hz"] = floor or table[0], applied_max or table[-1]
    return state


def build_board(
    root: Path,
    board: str,
    *,
    nvpmodel_mode: Optional[int] = -1,
    rails: bool = True,
    late_gpu: bool = False,
    hwmon_index: int = 3,
    labels: Optional[Tuple[str, ...]] = None,
) -> FakeTree:
    """A tree laid out as `board` (a key of fakes.boards.BOARDS) shows it.
    nvpmodel_mode -1: the board's default mode; None: no nvpmodel status file."""
    from fakes.rails import add_rails

    spec = BOARDS[board]
    root = Path(root)
    mode = spec.get("default_mode") if nvpmodel_mode == -1 else nvpmodel_mode
    state = _boot_state(spec, mode)
    state["late"] = late_gpu
    root.mkdir(parents=True, exist_ok=True)
    save_state(root, state)
    tree = _gpu(root, spec, state, late_gpu)
    save_state(root, state)
    _board_files(root, spec, mode)
    if rails:
        add_rails(tree, spec, hwmon_index, labels)
    return tree


def build_nano(root: Path, *, nvpmodel_mode: Optional[int] = 0, rails: bool = True) -> FakeTree:
    """Jetson Nano Developer Kit, L4T R32.7.1 (kernel 4.9), iio INA3221 layout."""
    return build_board(root, "nano", nvpmodel_mode=nvpmodel_mode, rails=rails)


def build_orin_nano(
    root: Path,
    *,
    release: str = "r36",
    nvpmodel_mode: Optional[int] = -1,
    hwmon_index: int = 3,
    labels: Tuple[str, str, str] = ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"),
    rails: bool = True,
    late_gpu: bool = False,
) -> FakeTree:
    """Jetson Orin Nano Developer Kit: "r36" Orin Nano Super on L4T R36.4 (JetPack
    6.2, kernel 5.15); "r35" Orin Nano 8GB on L4T R35.4 (JetPack 5, kernel 5.10)."""
    board = "orin-nano-r36" if release == "r36" else "orin-nano-r35"
    return build_board(
        root, board, nvpmodel_mode=nvpmodel_mode, rails=rails, late_gpu=late_gpu,
        hwmon_index=hwmon_index, labels=labels,
    )  # fmt: skip


def build_thor(root: Path) -> Path:
    """Jetson AGX Thor, L4T R38 (JetPack 7): GPC devfreq domain gpu-gpc-0 (jetson_stats
    jtop/core/hw_detect.py, gpu.py THOR_GPC) and no INA3221; other files illustrative."""
    root = Path(root)
    d = root / "sys/devices/platform/gpu-gpc-0/devfreq/gpu-gpc-0"
    for attr, value in (("cur_freq", "1575000000"), ("min_freq", "0"), ("max_freq", "1575000000")):
        _put(d / attr, value)
    _put(d / "governor", "nvhost_podgov", 0o644)
    _link(root / "sys/class/devfreq/gpu-gpc-0", d)
    _put(root / "etc/nv_tegra_release", "# R38 (release), REVISION: 2.0, BOARD: generic")
    _put(root / "proc/sys/kernel/osrelease", "6.8.12-1017-tegra")
    _put(root / "proc/device-tree/model", "NVIDIA Jetson AGX Thor Developer Kit\0")
    return root
