"""nvpmodel: the active power mode, and the GPU frequencies it allows
(docs/guides/jetson-boards.md, "The power mode's frequencies").

* The mode: `nvpmodel -q` ("NV Power Mode: <name>", the id on a later line; jetson_stats'
  tests/nvpmodel emulator), else /var/lib/nvpmodel/status ("pmode:<id>").
* Its limits: /etc/nvpmodel.conf, one "< POWER_MODEL ID=<id> NAME=<name> >" block per
  mode with "GPU MAX_FREQ <Hz>" / "GPU MIN_FREQ <Hz>" lines since L4T R32 (-1, 0 or
  2147483647: no limit; NVIDIA's nvpmodel_t210_jetson-nano.conf, the t194 and t234 confs
  in jetson_stats' tests/nvpmodel); L4T R28's TX2 conf writes sysfs paths instead.
* Configured numbers need not be table steps (TX2 MAXP_CORE_ARM: 1120000000 configured,
  MaxFreq=1134750000 in jetson_stats' tests/jetson_clocks), so the ceiling is what the
  kernel applied (`max_freq`) when that sits next to the configured number, else the
  configured number rounded to the nearest step.
"""

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from undercap._compat import run_captured
from undercap.devices.jetson.sysfs import read_optional

Runner = Callable[[List[str]], str]

#: a configured GPU limit at or above this many Hz means "no limit" (nvpmodel -p
#: prints 2147483647, INT_MAX, for the conf's -1)
NO_LIMIT_HZ = 2_000_000_000


@dataclass(frozen=True)
class NvpModel:
    """The active power mode and the GPU limits its conf block configures."""

    mode_id: Optional[int]
    mode_name: Optional[str]
    gpu_max_freq_hz: Optional[int]  # as configured; None: no cap, or unknown
    gpu_min_freq_hz: Optional[int]  # as configured; None: no floor, or unknown
    source: str  # where the mode came from
    conf_path: Optional[str]


@dataclass(frozen=True)
class ModeRange:
    """The table steps a power mode allows, and how undercap knows."""

    floor_hz: int
    ceiling_hz: int
    ceiling_source: str  # "no cap", "kernel max_freq", "conf rounded to the table", ...

    def allowed(self, table: Sequence[int]) -> Tuple[int, ...]:
        steps = tuple(f for f in table if self.floor_hz <= f <= self.ceiling_hz)
        return steps or (min(table, key=lambda f: abs(f - self.ceiling_hz)),)


def parse_nvpmodel_query(text: str) -> Optional[Tuple[str, int]]:
    """`nvpmodel -q` output -> (mode name, mode id). The id is on the line after
    'NV Power Mode: <name>' (newer releases print other lines first)."""
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
#: R28's path form: a GPU devfreq node's max_freq/min_freq (TX2: 17000000.gp10b)
_PATH_LIMIT = re.compile(r"/devfreq/[0-9a-f]+\.(gpu|gp10b|gv11b|ga10b)/(max|min)_freq$")


def _gpu_limit(parts: List[str]) -> Optional[Tuple[str, int]]:
    """('gpu_max_freq_hz' | 'gpu_min_freq_hz', Hz) for a GPU limit line, else None."""
    if len(parts) >= 3 and parts[0] == "GPU" and parts[1] in ("MAX_FREQ", "MIN_FREQ"):
        key, value = parts[1], parts[2]
    elif len(parts) == 2 and _PATH_LIMIT.search(parts[0]):
        key, value = parts[0].rsplit("/", 1)[1].upper(), parts[1]
    else:
        return None
    try:
        return f"gpu_{key.lower()}_hz", int(value)
    except ValueError:
        return None


def parse_nvpmodel_conf(text: str) -> Dict[int, Dict[str, object]]:
    """/etc/nvpmodel.conf -> {id: {"name", "gpu_max_freq_hz", "gpu_min_freq_hz"}}.
    Limits are None for "no limit"; PARAM blocks are skipped."""
    modes: Dict[int, Dict[str, object]] = {}
    current: Optional[int] = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("<"):
            m = _MODEL.match(line)
            current = int(m.group(1)) if m else None
            if m:
                modes[int(m.group(1))] = {
                    "name": m.group(2),
                    "gpu_max_freq_hz": None,
                    "gpu_min_freq_hz": None,
                }
            continue
        limit = _gpu_limit(line.split())
        if current is not None and limit is not None:
            key, hz = limit
            modes[current][key] = hz if 0 < hz < NO_LIMIT_HZ else None
    return modes


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

    def run(args: List[str]) -> str:
        return run_captured([binary, *args], timeout=10, check=False).stdout

    return run


def _active_mode(root: Path, runner: Optional[Runner]) -> Tuple[Optional[str], Optional[int], str]:
    """(name, id, source) from `nvpmodel -q`, else /var/lib/nvpmodel/status."""
    if runner is not None:
        try:
            parsed = parse_nvpmodel_query(runner(["-q"]))
        except (OSError, subprocess.SubprocessError):
            parsed = None
        if parsed:
            return parsed[0], parsed[1], "nvpmodel -q"
    status = read_optional(root / "var" / "lib" / "nvpmodel" / "status")
    m = re.search(r"pmode:0*(\d+)", status or "")
    if m:
        return None, int(m.group(1)), "/var/lib/nvpmodel/status"
    return None, None, "none"


def read_nvpmodel(root: Path, runner: Optional[Runner]) -> Optional[NvpModel]:
    """The active mode and its configured GPU limits. None without any nvpmodel."""
    conf = root / "etc" / "nvpmodel.conf"
    conf_text = read_optional(conf)
    modes = parse_nvpmodel_conf(conf_text) if conf_text else {}
    name, mode_id, source = _active_mode(root, runner)
    if mode_id is None and not modes:
        return None
    mode = modes.get(mode_id, {}) if mode_id is not None else {}
    cap, floor = mode.get("gpu_max_freq_hz"), mode.get("gpu_min_freq_hz")
    return NvpModel(
        mode_id=mode_id,
        mode_name=name or (str(mode["name"]) if mode else None),
        gpu_max_freq_hz=cap if isinstance(cap, int) else None,
        gpu_min_freq_hz=floor if isinstance(floor, int) else None,
        source=source,
        conf_path=str(conf) if conf_text else None,
    )


def mhz(hz: int) -> float:
    """Hz as MHz (to the Hz)."""
    return round(hz / 1e6, 6)


def nearest_step(table: Sequence[int], hz: int) -> int:
    """The table step closest to hz (ties: the higher step)."""
    return min(table, key=lambda f: (abs(f - hz), -f))


def _neighbours(table: Sequence[int], hz: int) -> Set[int]:
    """The steps either side of hz (hz itself when it is a step)."""
    below = [f for f in table if f <= hz]
    above = [f for f in table if f >= hz]
    return {max(below) if below else table[0], min(above) if above else table[-1]}


def mode_range(
    nvp: Optional[NvpModel], table: Sequence[int], applied_max_hz: Optional[int]
) -> ModeRange:
    """The floor and ceiling the active mode allows on this table (ascending, Hz).

    applied_max_hz: max_freq as read now. When it is the configured cap itself or a
    step next to it, it is what nvpmodel (and the kernel) made of the cap; anything
    else (a run's leftover lock, a thermal cap on 5.x kernels, a user's write) is not
    the mode's, and the configured cap is rounded onto the table instead."""
    floor = table[0]
    if nvp is not None and nvp.gpu_min_freq_hz is not None:
        floor = nearest_step(table, nvp.gpu_min_freq_hz)
    cap = None if nvp is None else nvp.gpu_max_freq_hz
    if cap is None or cap >= table[-1]:
        source = "no cap in this mode" if nvp and nvp.conf_path else "no cap known"
        return ModeRange(floor, table[-1], source)
    if applied_max_hz in _neighbours(table, cap) | {cap}:
        ceiling = max([f for f in table if f <= applied_max_hz] or [table[0]])
        return ModeRange(min(floor, ceiling), ceiling, "kernel max_freq after nvpmodel")
    ceiling = nearest_step(table, cap)
    return ModeRange(min(floor, ceiling), ceiling, "conf cap rounded to the nearest step")


def describe(nvp: Optional[NvpModel], rng: ModeRange) -> Optional[Dict[str, object]]:
    """The `nvpmodel` entry of `undercap devices`: configured and effective limits."""
    if nvp is None:
        return None
    cap, floor = nvp.gpu_max_freq_hz, nvp.gpu_min_freq_hz
    return {
        "mode_id": nvp.mode_id,
        "mode_name": nvp.mode_name,
        "gpu_max_freq_mhz": None if cap is None else mhz(cap),
        "gpu_min_freq_mhz": None if floor is None else mhz(floor),
        "ceiling_mhz": mhz(rng.ceiling_hz),
        "floor_mhz": mhz(rng.floor_hz),
        "ceiling_from": rng.ceiling_source,
        "source": nvp.source,
        "conf": nvp.conf_path,
    }
