"""A command's outputs, checked before it does any work and held while it runs: every
file and folder it was given can be written (artifacts.io.check_output), and each
folder it fills is this run's alone (artifacts.io.folder_lock). A refusal changes
nothing on disk."""

import argparse
import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple


def declare_outputs(
    p: argparse.ArgumentParser,
    *,
    files: Tuple[str, ...] = (),
    folders: Tuple[str, ...] = (),
    locked: Tuple[str, ...] = (),
) -> None:
    """Name a command's outputs (argument dests): files and folders are checked before
    the command runs (`held_outputs`), the `locked` folders held for its whole run."""
    p.set_defaults(output_files=files, output_folders=folders, locked_folders=locked)


def add_output(p: Any, what: str, func: Callable[..., int], **outputs: Tuple[str, ...]) -> None:
    """A command's last flag, the required -o/--output (`what` it writes), then the
    function the command runs and its `outputs` (declare_outputs's keywords)."""
    p.add_argument("-o", "--output", type=Path, required=True, help=what)
    p.set_defaults(func=func)
    declare_outputs(p, **outputs)


@contextlib.contextmanager
def held_outputs(args: argparse.Namespace) -> Iterator[None]:
    """The outputs `declare_outputs` named, checked and held (the module docstring)."""
    from undercap.artifacts.io import check_output, folder_lock

    def given(names: Tuple[str, ...]) -> List[Tuple[str, Any]]:
        return [(n, getattr(args, n, None)) for n in names if getattr(args, n, None)]

    for name, path in given(getattr(args, "output_files", ())):
        check_output(path, what=_flag(name))
    for name, path in given(getattr(args, "output_folders", ())):
        check_output(path, folder=True, what=_flag(name))
    with contextlib.ExitStack() as stack:
        for _, path in given(getattr(args, "locked_folders", ())):
            stack.enter_context(folder_lock(path))
        yield


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")
