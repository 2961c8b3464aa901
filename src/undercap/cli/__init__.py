"""The `undercap` command.

Each sub-command group lives in its own module exposing `register(subparsers)`;
heavy imports (torch, matplotlib, vendor libraries) happen inside the command
functions, so `undercap devices` and `undercap select` start fast.
"""

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence, Tuple

from undercap import __version__
from undercap.cli.outputs import held_outputs
from undercap.cli.preflight import check_torch_numpy
from undercap.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_USER_ERROR, UndercapError

# Order here is the order in `undercap --help`.
COMMAND_MODULES = (
    "undercap.cli.devices",
    "undercap.cli.profile",
    "undercap.cli.select",
    "undercap.cli.estimate",
    "undercap.cli.train",
    "undercap.cli.recipes",
    "undercap.cli.solar",
    "undercap.cli.fleet",
)
# The server's modules, on Python >= 3.8, with their commands, so that 3.6 can name them
# without importing them (tests/test_jetpack4.py checks the names); the others are what a
# board runs, down to JetPack 4.6's Python 3.6 (the device path, tests/device_path.py).
SERVER_COMMAND_MODULES = {
    "undercap.cli.select": ("select",),
    "undercap.cli.estimate": ("pretrain", "estimate", "plot-efficiency"),
    "undercap.cli.recipes": ("run", "compare"),
    "undercap.cli.solar": ("solar",),
    "undercap.cli.fleet": ("fleet",),
}
SERVER_COMMANDS = [c for cs in SERVER_COMMAND_MODULES.values() for c in cs]
SERVER_PYTHON = (3, 8)
# Commands that import torch: their torch/numpy versions are checked first (preflight).
TORCH_COMMANDS = frozenset(("profile", "pretrain", "estimate", "train", "run", "compare", "fleet"))


def build_parser() -> argparse.ArgumentParser:
    server = sys.version_info >= SERVER_PYTHON
    parser = argparse.ArgumentParser(
        prog="undercap",
        description="Find the batch size and GPU frequency that reach a target accuracy "
        "fastest under a power limit, then train that way.",
        epilog=None if server else f"On a server with Python >= 3.8: {', '.join(SERVER_COMMANDS)}.",
    )
    parser.add_argument("--version", action="version", version=f"undercap {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show full tracebacks instead of one-line errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        if server or name not in SERVER_COMMAND_MODULES:
            importlib.import_module(name).register(sub)
    return parser


def server_command_refusal(argv: Sequence[str], python: Tuple[int, ...] = sys.version_info) -> str:
    """The one error line for a server-side command on a board's Python (< 3.8, JetPack
    4.6), or '' where the command runs here."""
    if tuple(python) >= SERVER_PYTHON:
        return ""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in SERVER_COMMANDS:
        return ""
    here = "Python " + ".".join(str(p) for p in python[:3])
    return (
        f"`undercap {command}` runs on a server with Python >= 3.8, not on {here}: a board "
        "(JetPack 4.6) runs `undercap devices`, `restore`, `profile` and `train`; "
        "copy the profile to the server and the selection back"
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    refusal = server_command_refusal(sys.argv[1:] if argv is None else argv)
    if refusal:
        print("error: " + refusal, file=sys.stderr)
        return EXIT_USER_ERROR
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UndercapError as e:  # a flag undercap no longer has (cli/common.add_removed_flags)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        if args.command in TORCH_COMMANDS:
            check_torch_numpy()
        with held_outputs(args):  # every output writable, its folder this run's alone
            rc = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
    except UndercapError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return int(getattr(e, "exit_code", EXIT_USER_ERROR))
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("error: interrupted (device settings were restored)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `undercap devices | head`: the reader closed the pipe
        # Point stdout at /dev/null so the interpreter's final flush cannot raise again
        # (the Python docs' recipe for SIGPIPE, library/signal.html), and exit quietly
        # like a process killed by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as e:  # a file the OS refused that no nearer check named: one line
        if args.debug:
            raise
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except SystemExit as e:  # SIGTERM turned into SystemExit by devices.base
        if isinstance(e.code, int) and e.code >= 128:
            print("error: terminated (device settings were restored)", file=sys.stderr)
        raise
    return int(rc or 0)
