"""Errors a user can cause and fix. The CLI prints them as one `error:` line, exit 2."""

import importlib
from typing import Any, Dict

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
    down to (the power guard, train/session/guard.py). The run was checkpointed first where it
    had a checkpoint folder; the CLI exits with EXIT_CAP_EXCEEDED."""

    exit_code = EXIT_CAP_EXCEEDED


class PowerWaitError(CapExceededError):
    """Training paused for a cap under which no configuration runs, and the cap did not
    rise within the run's bound (`--max-wait-s`): stopped like a run over its cap
    (exit 4, after a checkpoint), rather than waiting without end."""


class MissingExtraError(UndercapError):
    """An optional dependency is not installed: the message names the pip install."""


def require(module: str, extra: str, purpose: str) -> Any:
    """Import an optional dependency, or say which extra to install: the core install is
    what a Jetson needs to train (torch, numpy, tqdm); the rest are extras (pyproject.toml)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{purpose} needs {module.split('.')[0]}, which is not installed: "
            f"pip install 'undercap[{extra}]'"
        ) from e


#: What undercap 0.3.0 removed from the product because it measured not to help
#: (docs/changelog.md; its benchmarks and results stay, reproducible with 0.2.0), and
#: what does the job now. A flag or keyword that asks for one is this one line.
REMOVED_IN_0_3 = {
    "race": "the race on the target picked the faster candidate no better than chance "
    "on the proxy matrix; several proxies' median r(b) (the ensemble rule) decides",
    "race_budget": "it sized the removed race on the target",
    "race_fraction": "it sized the removed race on the target",
    "online": "re-selecting from the target's own curve lowered no worst cell on the "
    "proxy matrix; several proxies' median r(b) (the ensemble rule) decides",
    "gns_check": "the gradient-noise-scale cross-check was skipped or wrong on most jobs "
    "of the proxy matrix; r(b) comes from the proxies alone",
    "gns_budget": "it sized the removed gradient-noise-scale cross-check",
    "rule": "the rule is Algorithm 1 with one proxy and the ensemble rule (the proxies' "
    "median r(b)) with several; the spread rule was no better than Algorithm 1 on the "
    "proxy matrix (the same worst cells)",
}


def removed(name: str) -> UndercapError:
    """The one line for an option undercap 0.3.0 removed (REMOVED_IN_0_3), by its
    keyword name: what it was measured to do, and what decides instead."""
    flag = "--" + name.replace("_", "-")
    return UndercapError(
        f"{flag} ({name}=) was removed in undercap 0.3.0: {REMOVED_IN_0_3[name]}. "
        "Drop it; undercap 0.2.0 reproduces its published results"
    )


def reject_removed(given: Dict[str, Any], where: str) -> None:
    """Refuse keywords of removed options (one line each) and unknown ones (TypeError)."""
    for name, value in given.items():
        if name not in REMOVED_IN_0_3:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        if value not in (None, False):  # asking for it; False/None asked for nothing
            raise removed(name)


def boolean_removed(name: str) -> bool:
    """Whether the removed option was an on/off flag (it had a `--no-` form)."""
    return name in ("race", "online", "gns_check")
