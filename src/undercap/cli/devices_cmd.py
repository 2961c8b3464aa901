"""`undercap devices` (what can undercap run on here) and `undercap restore` (put back
GPU settings a killed run left changed).

Neither imports torch: device backends never do, and pynvml is imported only by
devices/nvml.py when NVML GPUs are listed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from undercap.cli.common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "devices",
        help="list simulated devices and the real GPUs found here",
        description="List the simulated devices and any real device present: a Jetson "
        "(found through its sysfs) and NVIDIA GPUs (through NVML), with frequencies, "
        "power sensors, memory and whether clock control is permitted.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of device infos")
    p.add_argument(
        "--sysfs-root",
        default=None,
        metavar="DIR",
        help="root of a Jetson's filesystem (the folder holding sys/; default /)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--nvml",
        dest="nvml",
        action="store_true",
        default=None,
        help="list NVML GPUs and fail if NVML is unavailable (default: list them if present)",
    )
    g.add_argument("--no-nvml", dest="nvml", action="store_false", help="do not query NVML")
    p.set_defaults(func=cmd_devices)

    r = sub.add_parser(
        "restore",
        help="put back GPU settings left changed by a run that was killed",
        description="Replay the state files undercap writes before changing GPU settings. "
        "Runs end by restoring the settings themselves; this is for SIGKILL, crashes "
        "and power loss. Without options, every state file in the state folder is replayed.",
    )
    r.add_argument("--device", default=None, help="jetson or nvml:<index>")
    r.add_argument("--sysfs-root", default="/", metavar="DIR", help="jetson: filesystem root")
    r.add_argument("--state-file", type=Path, default=None, metavar="F", help="replay this file")
    r.add_argument(
        "--force", action="store_true", help="restore even if the run that wrote it still runs"
    )
    r.set_defaults(func=cmd_restore)


# --- devices ----------------------------------------------------------------------------
def cmd_devices(args: argparse.Namespace) -> int:
    infos: list[Any] = []
    notes: list[str] = []
    infos += _simulated_infos()
    infos += _jetson_infos(args.sysfs_root, notes)
    infos += _nvml_infos(args.nvml, notes)
    if args.json:
        print_json([i.to_dict() for i in infos])
    else:
        print(format_devices(infos, notes))
    return 0


def _simulated_infos() -> list[Any]:
    from undercap.devices import open_device, simulated_names

    out = []
    for name in simulated_names():
        with open_device(name) as dev:
            out.append(dev.info())
    return out


def _jetson_infos(sysfs_root: str | None, notes: list[str]) -> list[Any]:
    from undercap.devices.jetson import JetsonDevice
    from undercap.devices.jetson_sysfs import find_gpu_devfreq
    from undercap.errors import DeviceError

    root = Path(sysfs_root or "/")
    if find_gpu_devfreq(root) is None:
        where = root / "sys/class/devfreq"
        if sysfs_root is not None:  # the user pointed at a tree: it must be a Jetson's
            raise DeviceError(
                f"no Jetson GPU devfreq node under {where}: --sysfs-root must be the folder "
                "that holds a Jetson's sys/ (and proc/, etc/)"
            )
        notes.append(f"jetson: none found (no GPU devfreq node under {where})")
        return []
    with JetsonDevice(root) as dev:
        return [dev.info()]


def _nvml_infos(wanted: bool | None, notes: list[str]) -> list[Any]:
    if wanted is False:
        return []
    from undercap.devices.nvml import NvmlDevice, nvml_device_count
    from undercap.errors import DeviceError

    try:
        count = nvml_device_count()
    except DeviceError as e:
        if wanted:
            raise
        notes.append(f"nvml: not available ({e})")
        return []
    if count == 0:
        notes.append("nvml: no NVIDIA GPU")
    out = []
    for i in range(count):
        with NvmlDevice(i) as dev:
            out.append(dev.info())
    return out


def _freqs(freqs: tuple[float, ...]) -> str:
    if not freqs:
        return "-"
    if len(freqs) == 1:
        return f"{freqs[0]:g}"
    return f"{freqs[0]:g} .. {freqs[-1]:g} ({len(freqs)} steps)"


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "?"


def _control(info: Any) -> str:
    if info.is_simulated:
        return "yes (simulated)" if info.control_permitted else "no"
    return str(info.details.get("control") or ("yes" if info.control_permitted else "no"))


def format_devices(infos: list[Any], notes: list[str]) -> str:
    """A table of every device, then details of the real ones, then notes."""
    head = ("NAME", "BACKEND", "FREQUENCIES (MHz)", "MEMORY", "POWER SENSORS", "CONTROL")
    rows = [
        (
            i.name,
            i.backend,
            _freqs(i.freqs_mhz),
            _gib(i.memory_bytes),
            ", ".join(i.power_sensors) or "none",
            _control(i),
        )
        for i in infos
    ]
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in [head, *rows]
    ]
    for info in infos:
        if info.backend == "jetson":
            lines += ["", *_jetson_lines(info)]
        elif info.backend == "nvml":
            lines += ["", *_nvml_lines(info)]
    if any(i.is_simulated for i in infos):
        lines += ["", "sim:* devices are SIMULATED: their clocks and power come from a model."]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def _jetson_lines(info: Any) -> list[str]:
    d = info.details
    lines = [
        f"{info.name}: {d.get('board') or 'unknown board'}, L4T {d.get('l4t') or '?'}, "
        f"GPU {d.get('gpu') or '?'} ({d.get('devfreq_node')})"
    ]
    nvp = d.get("nvpmodel")
    if nvp:
        cap = nvp.get("gpu_max_freq_mhz")
        lines.append(
            f"  nvpmodel: mode {nvp.get('mode_id')} {nvp.get('mode_name') or '?'} "
            f"({'GPU cap ' + format(cap, 'g') + ' MHz' if cap else 'no GPU cap'}; "
            f"from {nvp.get('source')})"
        )
    power = d.get("power") or {}
    if power.get("rails"):
        rails = ", ".join(f"{k} ({v})" for k, v in power["rails"].items())
        gpu = power.get("gpu_rail") or power.get("gpu_combined_rail") or "none"
        lines.append(f"  power: board = {power.get('total_rail')}; GPU rail = {gpu}")
        lines.append(f"  rails: {rails}")
    else:
        lines.append("  power: no INA3221 rails found: power cannot be measured")
    lines.append(
        f"  now: {d.get('cur_freq_mhz'):g} MHz (min {d.get('min_freq_mhz'):g}, max "
        f"{d.get('max_freq_mhz'):g}), governor {d.get('governor')}, railgate_enable "
        f"{d.get('railgate_enable')}"
    )
    return lines


def _nvml_lines(info: Any) -> list[str]:
    d = info.details
    lim = d.get("power_limit_constraints_w")
    return [
        f"{info.name}: {d.get('gpu')} ({d.get('uuid')}), driver {d.get('driver')}",
        f"  power: {d.get('power_source')}; limit {d.get('power_limit_w')} W"
        + (f" (allowed {lim[0]:g} .. {lim[1]:g} W)" if lim else ""),
    ]


# --- restore ----------------------------------------------------------------------------
def cmd_restore(args: argparse.Namespace) -> int:
    from undercap.devices import statefile

    paths = _state_files(args)
    existing = [p for p in paths if p.is_file()]
    if not existing:
        where = ", ".join(str(p) for p in paths) or str(statefile.state_dir(args.sysfs_root))
        print(
            f"nothing to restore: no state file at {where} (runs restore their settings "
            "when they end; a file is left only when one was killed)"
        )
        return 0
    for path in existing:
        print(statefile.replay(path, force=args.force))
    return 0


def _state_files(args: argparse.Namespace) -> list[Path]:
    from undercap.devices import statefile
    from undercap.errors import DeviceError

    if args.state_file is not None:
        if not args.state_file.is_file():
            raise DeviceError(f"state file {args.state_file} does not exist")
        return [args.state_file]
    if args.device is None:
        return statefile.list_states(statefile.state_dir(args.sysfs_root))
    if args.device == "jetson":
        from undercap.devices.jetson import JetsonDevice

        with JetsonDevice(args.sysfs_root, nvpmodel_runner=None) as dev:
            return [dev.state_file]
    if args.device.startswith("nvml:") and args.device[5:].isdigit():
        from undercap.devices.nvml import NvmlDevice

        with NvmlDevice(int(args.device[5:])) as dev:
            return [dev.state_file]
    if args.device.startswith("sim:"):
        return []  # simulated devices change nothing real
    raise DeviceError(f"unknown device {args.device!r}: use jetson or nvml:<index>")
