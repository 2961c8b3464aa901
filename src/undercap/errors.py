"""Errors a user can cause and fix. The CLI prints them as one `error:` line, exit 2."""

import importlib
from typing import Any

# Exit codes a script can rely on (README, "Exit codes"). 1 stays Python's own: a bug.
EXIT_OK = 0  # done; for `train` and `run`: the target accuracy was reached
EXIT_USER_ERROR = 2  # a mistake the `error:` line says how to fix (argparse uses 2 too)
EXIT_TARGET_NOT_REACHED = 3  # ran to the end without trouble, but missed the target
EXIT_CAP_EXCEEDED = 4  # training went over its power cap with nothing left to step down to
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # SIGTERM: 128 + SIGTERM
EXIT_BROKEN_PIPE = 141  # the reader went away (`undercap devices | head`): 128 + SIGPIPE


class UndercapError(Exception):
    """Base class: the message says what went wrong and what to do."""


class ArtifactError(UndercapError):
    """A profile/efficiency/result file is missing, malformed or inconsistent."""


class DataError(UndercapError):
    """A dataset file is missing or not in the expected format."""


class DeviceError(UndercapError):
    """A device backend failed (unknown device, unsupported operation, vendor error)."""


class DevicePermissionError(DeviceError):
    """The device exists but we may not change (or read) it: names the file and the fix."""


class DeviceOutOfMemoryError(DeviceError):
    """The batch does not fit in device memory."""


class InfeasibleError(UndercapError):
    """No configuration satisfies the power limit."""


class CapExceededError(InfeasibleError):
    """Training went over its cap with no lower clock or smaller batch size left to step
    down to (the power guard, train/guard.py). The run was checkpointed first where it
    had a checkpoint folder; the CLI exits with EXIT_CAP_EXCEEDED."""

    exit_code = EXIT_CAP_EXCEEDED


class PowerWaitError(CapExceededError):
    """Training paused for a cap under which no configuration runs, and the cap did not
    rise within the run's bound (`--max-wait-s`): stopped like a run over its cap
    (exit 4, after a checkpoint), rather than waiting without end."""


class MissingExtraError(UndercapError):
    """An optional dependency is not installed: the message names the pip install."""


def require(module: str, extra: str, purpose: str) -> Any:
    """Import an optional dependency, or say which extra to install: the core install
    is only what a Jetson needs to train (torch, numpy, tqdm); plotting, .mat files,
    the bundled digits and image folders are extras (pyproject.toml)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{purpose} needs {module.split('.')[0]}, which is not installed: "
            f"pip install 'undercap[{extra}]'"
        ) from e
