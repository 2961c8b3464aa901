"""Jetson sysfs helpers: find the GPU (its devfreq node, or the GPU device before it
has one), read/write attributes with one-line errors, read board facts. No torch, no
vendor library.

Layouts (per board: docs/guides/jetson-boards.md), from NVIDIA's jetson_clocks (L4T
R32, R32.5, R36), nvpmodel confs and the nvgpu driver (os/linux/sysfs.c, scale.c):
* GPU devfreq node /sys/class/devfreq/<name> (a symlink into /sys/devices), e.g.
  `57000000.gpu` (Nano), `17000000.ga10b` (Orin, R35); its `device` links to the GPU
  platform device, which holds railgate_enable (nvgpu also links it as `gpu.0`).
* JetPack 6 (R36) registers the GPU with devfreq only once it has powered up (gpu.py);
  `find_gpu_device` finds it by of_node/compatible, as jetson_clocks does.
* Thor (JetPack 7) has GPC devfreq domains `gpu-gpc-0` (jetson_stats
  jtop/core/hw_detect.py) and no INA3221 rails: not supported here.
"""

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple, Union

from undercap.errors import DeviceError, DevicePermissionError

#: devfreq node names of Jetson GPUs (platform address + GPU name).
GPU_NODE_SUFFIXES = (".gpu", ".gp10b", ".gv11b", ".ga10b")
#: device-tree node names of the GPU (what jetson-stats matches in device/of_node/name).
GPU_OF_NAMES = frozenset({"gpu", "gp10b", "gv11b", "ga10b"})
#: of_node/compatible strings of Jetson GPUs (jetson_clocks R36: gv11b, gp10b, ga10b;
#: the Nano's device tree: nvidia,tegra210-gm20b)
GPU_COMPATIBLES = frozenset(
    {"nvidia,gp10b", "nvidia,gv11b", "nvidia,ga10b", "nvidia,tegra210-gm20b", "nvidia,gm20b"}
)
#: any NVIDIA integrated GPU: nvidia,gm20b / gp10b / gv11b / ga10b, with or without a SoC
_NVIDIA_IGPU = re.compile(r"^nvidia,(tegra\d+-)?g[a-z]\d+b$")
#: Thor's GPU devfreq domains (JetPack 7)
THOR_NODES = ("gpu-gpc-0", "gpu-nvd-0")

ROOT_FIX = "run undercap as root (sudo)"
READ_ONLY_FIX = "or pass --read-only to measure at the current clock without changing it"

Writer = Callable[[Path, str], None]


class JetsonUnavailable(DeviceError):
    """A Jetson is there, but undercap cannot use its GPU (yet): Thor, or a GPU that
    has not registered with devfreq. `undercap devices` lists it as a note."""


@dataclass(frozen=True)
class DevfreqNode:
    """The GPU's devfreq folder and its platform device (symlinks resolved)."""

    name: str  # e.g. "57000000.gpu"
    path: Path  # .../devfreq/<name>
    device_path: Path  # the GPU platform device (holds railgate_enable)
    of_name: Optional[str]
    compatible: Tuple[str, ...]

    def attr(self, name: str) -> Path:
        return self.path / name

    @property
    def railgate_path(self) -> Optional[Path]:
        p = self.device_path / "railgate_enable"
        return p if p.is_file() else None


def read_dt_strings(path: Path) -> Tuple[str, ...]:
    """Device-tree properties are NUL-separated strings."""
    try:
        raw = path.read_bytes()
    except OSError:
        return ()
    return tuple(s for s in raw.decode("utf-8", "replace").split("\0") if s.strip())


def _is_gpu(name: str, compatible: Tuple[str, ...], of_name: Optional[str]) -> bool:
    """A Jetson GPU's devfreq node. Where the device tree names the device, its
    compatible must be an NVIDIA integrated GPU's (another SoC's `ff9a0000.gpu`, a
    Mali, is not one); else the node name or of_node name decides."""
    if compatible:
        return any(_NVIDIA_IGPU.match(c) for c in compatible)
    return name.endswith(GPU_NODE_SUFFIXES) or of_name in GPU_OF_NAMES


def find_gpu_devfreq(root: Union[str, Path] = "/") -> Optional[DevfreqNode]:
    """Scan <root>/sys/class/devfreq/* for the GPU (other engines such as vic or
    nvdec have devfreq nodes too). None when there is none."""
    base = Path(root) / "sys" / "class" / "devfreq"
    if not base.is_dir():
        return None
    for entry in sorted(base.iterdir()):
        of_node = entry / "device" / "of_node"
        compatible = read_dt_strings(of_node / "compatible")
        of_name = next(iter(read_dt_strings(of_node / "name")), None)
        if _is_gpu(entry.name, compatible, of_name) and (entry / "available_frequencies").is_file():
            path = entry.resolve()
            device = (entry / "device").resolve() if (entry / "device").exists() else path
            return DevfreqNode(entry.name, path, device, of_name, compatible)
    return None


def _gpu_device_candidates(root: Path) -> Iterator[Path]:
    """Where the GPU platform device may sit: nvgpu's gpu.0 links first, then the
    platform buses (R36: /sys/devices/platform/bus@0/17000000.gpu)."""
    devices = root / "sys" / "devices"
    yield from (devices / "platform" / "gpu.0", devices / "gpu.0")
    for pattern in ("platform/*", "platform/bus@0/*", "*"):
        yield from sorted(devices.glob(pattern))


def find_gpu_device(root: Union[str, Path] = "/") -> Optional[Path]:
    """The GPU platform device (resolved) by its of_node/compatible, whether or not
    it has a devfreq node yet; None when the tree has no Jetson GPU."""
    for cand in _gpu_device_candidates(Path(root)):
        compatible = read_dt_strings(cand / "of_node" / "compatible")
        if GPU_COMPATIBLES.intersection(compatible) and (cand / "railgate_enable").is_file():
            return cand.resolve()
    return None


def thor_node(root: Union[str, Path] = "/") -> Optional[Path]:
    """Thor's GPC devfreq domain, when the tree is a Jetson Thor's."""
    base = Path(root) / "sys" / "class" / "devfreq"
    return next((base / n for n in THOR_NODES if (base / n).exists()), None)


# --- attribute I/O with one-line errors ---------------------------------------------
def read_attr(path: Path) -> str:
    """Read a sysfs/proc file, stripped. Errors name the file and the fix."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip().strip("\0")
    except PermissionError as e:
        raise DevicePermissionError(
            f"cannot read {path}: permission denied; {ROOT_FIX} {READ_ONLY_FIX}"
        ) from e
    except FileNotFoundError as e:
        raise DeviceError(f"{path} is missing: the board or driver changed while running") from e
    except OSError as e:
        raise DeviceError(f"cannot read {path}: {e.strerror or e}") from e


def read_int(path: Path) -> int:
    text = read_attr(path)
    try:
        return int(text.split()[0])
    except (ValueError, IndexError) as e:
        raise DeviceError(f"{path}: expected an integer, read {text!r}") from e


def read_optional(path: Optional[Path]) -> Optional[str]:
    if path is None or not path.is_file():
        return None
    try:
        return read_attr(path)
    except DeviceError:
        return None


def write_attr(path: Path, value: str) -> None:
    """Default writer: one write() like `echo value > path`. The kernel's store handler
    runs inside the write and reports rejection through errno."""
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


def write_with(writer: Writer, path: Path, value: str) -> None:
    """One write through `writer` (tests pass a fake kernel); errors as write_error's."""
    try:
        writer(path, value)
    except OSError as e:
        raise write_error(path, value, e) from e


def write_error(path: Path, value: str, e: OSError) -> DeviceError:
    """Map an OSError from a sysfs write to a project error with the fix."""
    if e.errno in (errno.EACCES, errno.EPERM):
        return DevicePermissionError(
            f"cannot write {path}: permission denied (writable by root only); "
            f"{ROOT_FIX} {READ_ONLY_FIX}"
        )
    if e.errno == errno.EINVAL:
        return DeviceError(f"the kernel rejected {value} for {path} (invalid argument)")
    return DeviceError(f"cannot write {value} to {path}: {e.strerror or e}")


def can_write(path: Path) -> bool:
    return path.is_file() and os.access(path, os.W_OK)


# --- board facts ----------------------------------------------------------------------
def board_model(root: Path) -> Optional[str]:
    """E.g. 'NVIDIA Jetson Nano Developer Kit' from the device tree."""
    return next(iter(read_dt_strings(root / "proc" / "device-tree" / "model")), None)


def l4t_release(root: Path) -> Optional[str]:
    """'R32.7.1' from the first line of /etc/nv_tegra_release."""
    text = read_optional(root / "etc" / "nv_tegra_release")
    if not text:
        return None
    m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"R{m.group(1)}.{m.group(2)}" if m else text.splitlines()[0]


def mem_total_bytes(root: Path) -> int:
    """MemTotal from /proc/meminfo: Jetson GPUs share system memory with the CPU."""
    path = root / "proc" / "meminfo"
    for line in read_attr(path).splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024  # reported in kB
    raise DeviceError(f"{path} has no MemTotal line")


def kernel_release(root: Path) -> Optional[str]:
    """'5.15.136-tegra' from /proc/sys/kernel/osrelease (what `uname -r` prints)."""
    return read_optional(root / "proc" / "sys" / "kernel" / "osrelease")


def jetson_present(root: Union[str, Path] = "/") -> bool:
    """A Jetson GPU in any state: a devfreq node, a GPU device without one yet
    (JetPack 6 before the GPU's first power-up), or Thor's GPC domain."""
    return any(f(root) is not None for f in (find_gpu_devfreq, find_gpu_device, thor_node))
