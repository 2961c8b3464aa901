"""`undercap-helper`: serve clock control to a group's members (package docstring).

    undercap-helper serve --group undercap --device jetson
    undercap-helper serve --socket /run/undercap/helper.sock --group undercap \\
        --mode 0660 --device nvml:0 --device nvml:1
    undercap-helper status            # which devices, and who controls each

Run by the systemd unit (contrib/undercap-helper.service), as root. Bad arguments and
devices it cannot control are one `error:` line and exit code 2, before it listens.
"""

import argparse
import grp
import json
import logging
import sys
from typing import Dict, List, Optional

from undercap.devices.helper.protocol import DEFAULT_SOCKET
from undercap.errors import EXIT_USER_ERROR, UndercapError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="undercap-helper",
        description="Lock and restore GPU clocks for members of one group, so that "
        "undercap's training never runs as root; a device goes back to its saved settings "
        "when its client's connection closes, however the client ends.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    s = sub.add_parser("serve", help="serve the named devices on a Unix socket (as root)")
    s.add_argument("--socket", default=DEFAULT_SOCKET, help=f"default {DEFAULT_SOCKET}")
    s.add_argument("--group", required=True, help="the group whose members may use it")
    s.add_argument("--mode", default="0660", help="the socket's permissions (default 0660)")
    s.add_argument(
        "--device",
        action="append",
        required=True,
        dest="devices",
        help="jetson or nvml:<index>; repeat for several",
    )
    s.add_argument("--sysfs-root", default="/", metavar="DIR", help="jetson: filesystem root")
    t = sub.add_parser("status", help="the devices a running helper serves, and their clients")
    t.add_argument("--socket", default=DEFAULT_SOCKET, help=f"default {DEFAULT_SOCKET}")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        return serve(args) if args.command == "serve" else status(args)
    except UndercapError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR


def serve(args: argparse.Namespace) -> int:
    from undercap.devices.helper.server import Helper

    gid = _gid(args.group)
    mode = _mode(args.mode)
    devices = open_devices(args.devices, args.sysfs_root)
    helper = Helper(args.socket, gid, devices)
    log = logging.getLogger("undercap-helper")
    try:
        for line in helper.restore_leftovers():
            log.info(line)
        helper.listen(mode)
        names = ", ".join(sorted(devices))
        helper.serve_forever(
            lambda: log.info("serving %s on %s to group %s", names, args.socket, args.group)
        )
    finally:
        for device in devices.values():
            device.close()
    return 0


def open_devices(names: List[str], sysfs_root: str) -> Dict[str, object]:
    """Each named device with clock control, checked now: a helper that cannot write
    says so before it listens."""
    devices: Dict[str, object] = {}
    try:
        for name in dict.fromkeys(names):
            devices[name] = _direct(name, sysfs_root)
            devices[name].check_control()  # type: ignore[attr-defined]
    except BaseException:
        for device in devices.values():
            device.close()  # type: ignore[attr-defined]
        raise
    return devices


def _direct(name: str, sysfs_root: str) -> object:
    """The backend itself, never a relay (a helper must not relay to a helper)."""
    if name == "jetson":
        from undercap.devices.jetson import JetsonDevice

        return JetsonDevice(sysfs_root)
    if name.startswith("nvml:") and name[5:].isdigit():
        from undercap.devices.nvml import NvmlDevice

        return NvmlDevice(int(name[5:]), allow_clock_control=True)
    raise UndercapError(f"--device {name}: the helper serves jetson or nvml:<index>")


def status(args: argparse.Namespace) -> int:
    from undercap.devices.helper.client import HelperClient

    client = HelperClient(args.socket, timeout_s=5.0)
    try:
        hello = client.call("hello")
        state = client.call("status")
    finally:
        client.close()
    out = {"helper": hello.get("helper"), "pid": hello.get("pid"), "devices": state.get("devices")}
    print(json.dumps(out, indent=2))
    return 0


def _gid(group: str) -> int:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise UndercapError(f"--group {group}: no such group (groupadd --system {group})") from None


def _mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise UndercapError(f"--mode {text}: an octal mode such as 0660") from None
    if mode & 0o007:
        raise UndercapError(f"--mode {text}: others may not connect (use 0660 or 0600)")
    return mode


if __name__ == "__main__":
    sys.exit(main())
