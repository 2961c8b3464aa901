"""`undercap devices` (what can undercap run on here) and `undercap restore` (put back
GPU settings a killed run left changed). Neither imports torch: device backends never
do, and pynvml is imported only by devices/nvml.py when NVML GPUs are listed."""

import argparse
from pathlib import Path

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
        metavar="DIR",
        help="root of a Jetson's filesystem (the folder holding sys/; default /)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--nvml",
        action="store_true",
        default=None,
        help="list NVML GPUs and fail if NVML is unavailable (default: list them if present)",
    )
    g.add_argument("--no-nvml", dest="nvml", action="store_false", help="do not query NVML")
    p.add_argument(
        "--helper",
        metavar="SOCKET",
        help="the undercap-helper socket clock control would go through (default: "
        "$UNDERCAP_HELPER, else /run/undercap/helper.sock where it exists)",
    )
    p.set_defaults(func=cmd_devices)

    r = sub.add_parser(
        "restore",
        help="put back GPU settings left changed by a run that was killed",
        description="Replay the state files undercap writes before changing GPU settings. "
        "Runs end by restoring the settings themselves; this is for SIGKILL, crashes "
        "and power loss. Without options, every state file in the state folder is replayed.",
    )
    r.add_argument("--device", help="jetson or nvml:<index>")
    r.add_argument("--sysfs-root", default="/", metavar="DIR", help="jetson: filesystem root")
    r.add_argument("--state-file", type=Path, metavar="F", help="replay this file")
    r.add_argument(
        "--force", action="store_true", help="restore even if the run that wrote it still runs"
    )
    r.set_defaults(func=cmd_restore)


def cmd_devices(args: argparse.Namespace) -> int:
    from undercap.devices import discover
    from undercap.report.devices import format_devices

    infos, notes = discover(args.sysfs_root, args.nvml, args.helper)
    if args.json:
        print_json([i.to_dict() for i in infos])
    else:
        print(format_devices(infos, notes))
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from undercap.devices import replay, state_files
    from undercap.devices.state import state_dir
    from undercap.errors import DeviceError

    if args.state_file is not None:
        if not args.state_file.is_file():
            raise DeviceError(f"state file {args.state_file} does not exist")
        paths = [args.state_file]
    else:
        paths = state_files(args.device, args.sysfs_root)
    existing = [p for p in paths if p.is_file()]
    if not existing:
        where = ", ".join(str(p) for p in paths) or str(state_dir(args.sysfs_root))
        print(
            f"nothing to restore: no state file at {where} (runs restore their settings "
            "when they end; a file is left only when one was killed)"
        )
        return 0
    for path in existing:
        print(replay(path, force=args.force))
    return 0
