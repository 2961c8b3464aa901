"""Jetson sysfs helpers: find the GPU's devfreq node, read/write attributes with
one-line errors, parse nvpmodel, read board facts. No torch, no vendor library.

Layouts (NVIDIA L4T, jetson_clocks and jetson-stats agree):
* GPU devfreq node, reached through /sys/class/devfreq/<name> (a symlink into
  /sys/devices): Nano/TX1 `57000000.gpu`, TX2 `17000000.gp10b`, Xavier
  `17000000.gv11b`, Orin `17000000.ga10b` (L4T R35) or `17000000.gpu` (R36).
  Files: available_frequencies (Hz), cur_freq, min_freq, max_freq, governor,
  available_governors, target_freq. `device` links to the GPU's platform device,
  which holds railgate_enable.
* nvpmodel: `nvpmodel -q` prints "NV Power Mode: <name>" and the mode id on the next
  line; /var/lib/nvpmodel/status holds "pmode:<id>"; /etc/nvpmodel.conf has one
  "< POWER_MODEL ID=<id> NAME=<name> >" block per mode, whose "GPU MAX_FREQ <Hz>"
  line caps the GPU (-1 or 0: no cap).
"""

from __future__ import annotations

import errno
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Union

from undercap.errors import DeviceError, DevicePermissionError

#: devfreq node names of Jetson GPUs (platform address + GPU name).
GPU_NODE_SUFFIXES = (".gpu", ".gp10b", ".gv11b", ".ga10b")
#: device-tree node names of the GPU (what jetson-stats matches in device/of_node/name).
GPU_OF_NAMES = frozenset({"gpu", "gp10b", "gv11b", "ga10b"})

ROOT_FIX = "run undercap as root (sudo)"
READ_ONLY_FIX = "or pass --read-only to measure at the current clock without changing it"

Writer = Callable[[Path, str], None]
Runner = Callable[[List[str]], str]


@dataclass(frozen=True)
class DevfreqNode:
    """The GPU's devfreq folder and its platform device (symlinks resolved)."""

    name: str  # e.g. "57000000.gpu"
    path: Path  # .../devfreq/<name>
    device_path: Path  # the GPU platform device (holds railgate_enable)
    of_name: Optional[str]
    compatible: tuple[str, ...]

    def attr(self, name: str) -> Path:
        return self.path / name

    @property
    def railgate_path(self) -> Optional[Path]:
        p = self.device_path / "railgate_enable"
        return p if p.is_file() else None


def _read_dt_strings(path: Path) -> tuple[str, ...]:
    """Device-tree properties are NUL-separated strings."""
    try:
        raw = path.read_bytes()
    except OSError:
        return ()
    return tuple(s for s in raw.decode("utf-8", "replace").split("\0") if s.strip())


def find_gpu_devfreq(root: Union[str, Path] = "/") -> Optional[DevfreqNode]:
    """Scan <root>/sys/class/devfreq/* for the GPU (other engines such as vic or
    nvdec have devfreq nodes too). None when there is none."""
    base = Path(root) / "sys" / "class" / "devfreq"
    if not base.is_dir():
        return None
    for entry in sorted(base.iterdir()):
        of_names = _read_dt_strings(entry / "device" / "of_node" / "name")
        of_name = of_names[0] if of_names else None
        if not (entry.name.endswith(GPU_NODE_SUFFIXES) or of_name in GPU_OF_NAMES):
            continue
        if not (entry / "available_frequencies").is_file():
            continue
        path = entry.resolve()
        device = (entry / "device").resolve() if (entry / "device").exists() else path
        return DevfreqNode(
            name=entry.name,
            path=path,
            device_path=device,
            of_name=of_name,
            compatible=_read_dt_strings(entry / "device" / "of_node" / "compatible"),
        )
    return None


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
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(value)
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
    import os

    return path.is_file() and os.access(path, os.W_OK)


# --- board facts ----------------------------------------------------------------------
def board_model(root: Path) -> Optional[str]:
    """E.g. 'NVIDIA Jetson Nano Developer Kit' from the device tree."""
    names = _read_dt_strings(root / "proc" / "device-tree" / "model")
    return names[0] if names else None


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
            parts = line.split()
            return int(parts[1]) * 1024  # reported in kB
    raise DeviceError(f"{path} has no MemTotal line")


# --- nvpmodel -------------------------------------------------------------------------
@dataclass(frozen=True)
class NvpModel:
    """The active power mode and the GPU cap it sets."""

    mode_id: Optional[int]
    mode_name: Optional[str]
    gpu_max_freq_hz: Optional[int]  # None: no cap in this mode, or unknown
    source: str  # where the mode came from
    conf_path: Optional[str]

    def to_dict(self) -> dict[str, object]:
        return {
            "mode_id": self.mode_id,
            "mode_name": self.mode_name,
            "gpu_max_freq_mhz": None
            if self.gpu_max_freq_hz is None
            else round(self.gpu_max_freq_hz / 1e6, 6),
            "source": self.source,
            "conf": self.conf_path,
        }


def parse_nvpmodel_query(text: str) -> Optional[tuple[str, int]]:
    """`nvpmodel -q` output -> (mode name, mode id). The id is on the line after
    'NV Power Mode: <name>' (newer releases print 'NV Fan Mode: ...' first)."""
    lines = [ln.strip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        m = re.match(r"NV Power Mode:\s*(\S.*)$", line)
        if m:
            for nxt in lines[i + 1 :]:
                if nxt.isdigit():
                    return m.group(1).strip(), int(nxt)
                if nxt:
                    break
    return None


_MODEL = re.compile(r"^<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=(\S+?)\s*>")
_DEFAULT = re.compile(r"^<\s*PM_CONFIG\s+DEFAULT=(\d+)\s*>")


def parse_nvpmodel_conf(text: str) -> tuple[dict[int, dict[str, object]], Optional[int]]:
    """/etc/nvpmodel.conf -> ({id: {"name", "gpu_max_freq_hz"}}, default id).
    PARAM blocks (which map names to sysfs files) are skipped."""
    modes: dict[int, dict[str, object]] = {}
    default: Optional[int] = None
    current: Optional[int] = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("<"):
            m, d = _MODEL.match(line), _DEFAULT.match(line)
            current = int(m.group(1)) if m else None
            if m:
                modes[current] = {"name": m.group(2), "gpu_max_freq_hz": None}  # type: ignore[index]
            if d:
                default = int(d.group(1))
            continue
        parts = line.split()
        if current is not None and len(parts) >= 3 and parts[:2] == ["GPU", "MAX_FREQ"]:
            try:
                hz = int(parts[2])
            except ValueError:
                continue
            modes[current]["gpu_max_freq_hz"] = hz if hz > 0 else None
    return modes, default


def default_nvpmodel_runner(root: Path) -> Optional[Runner]:
    """Run the host's nvpmodel only when working on the real root: a copied tree is
    not described by this machine's nvpmodel."""
    if root.resolve() != Path("/"):
        return None
    binary = shutil.which("nvpmodel") or next(
        (p for p in ("/usr/sbin/nvpmodel", "/usr/bin/nvpmodel") if Path(p).is_file()), None
    )
    if binary is None:
        return None

    def run(args: list[str]) -> str:
        out = subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=10, check=False
        )
        return out.stdout

    return run


def read_nvpmodel(root: Path, runner: Optional[Runner]) -> Optional[NvpModel]:
    """The active mode from `nvpmodel -q`, else /var/lib/nvpmodel/status; the GPU cap
    from /etc/nvpmodel.conf. None when the board has no nvpmodel at all."""
    conf = root / "etc" / "nvpmodel.conf"
    conf_text = read_optional(conf)
    modes, _default = parse_nvpmodel_conf(conf_text) if conf_text else ({}, None)
    name: Optional[str] = None
    mode_id: Optional[int] = None
    source = "none"
    if runner is not None:
        try:
            parsed = parse_nvpmodel_query(runner(["-q"]))
        except (OSError, subprocess.SubprocessError):
            parsed = None
        if parsed:
            (name, mode_id), source = parsed, "nvpmodel -q"
    if mode_id is None:
        status = read_optional(root / "var" / "lib" / "nvpmodel" / "status")
        m = re.search(r"pmode:0*(\d+)", status or "")
        if m:
            mode_id, source = int(m.group(1)), "/var/lib/nvpmodel/status"
    if mode_id is None and not modes:
        return None
    mode = modes.get(mode_id) if mode_id is not None else None
    cap = mode.get("gpu_max_freq_hz") if mode else None
    return NvpModel(
        mode_id=mode_id,
        mode_name=name or (str(mode["name"]) if mode else None),
        gpu_max_freq_hz=int(cap) if isinstance(cap, int) else None,
        source=source,
        conf_path=str(conf) if conf_text else None,
    )
