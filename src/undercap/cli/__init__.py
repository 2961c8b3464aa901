"""The `undercap` command.

Each sub-command group lives in its own module exposing `register(subparsers)`;
heavy imports (torch, matplotlib, vendor libraries) happen inside the command
functions, so `undercap devices` and `undercap select` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Optional

from undercap import __version__
from undercap.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USER_ERROR,
    UndercapError,
)

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
# Commands that import torch: their torch/numpy versions are checked first (preflight).
TORCH_COMMANDS = frozenset(("profile", "pretrain", "estimate", "train", "run", "compare", "fleet"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="undercap",
        description="Find the batch size and GPU frequency that reach a target accuracy "
        "fastest under a power limit, then train that way.",
    )
    parser.add_argument("--version", action="version", version=f"undercap {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show full tracebacks instead of one-line errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        if args.command in TORCH_COMMANDS:
            from undercap.cli.preflight import check_torch_numpy

            check_torch_numpy()
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
    except BrokenPipeError:
        return _reader_gone()
    except SystemExit as e:  # SIGTERM turned into SystemExit by devices.base
        if isinstance(e.code, int) and e.code >= 128:
            print("error: terminated (device settings were restored)", file=sys.stderr)
        raise
    return int(rc or 0)


def _reader_gone() -> int:
    """`undercap devices | head`: the reader closed the pipe. Point stdout at /dev/null
    so the interpreter's final flush cannot raise again (the Python docs' recipe for
    SIGPIPE, library/signal.html), and exit quietly like a process killed by SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
