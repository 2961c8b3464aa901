"""Checks that run before a command imports torch.

torch wheels built against numpy 1.x (every torch before 2.3, so NVIDIA's JetPack 5
and 6 wheels, 2.0 and 2.1) cannot exchange arrays with numpy 2, and pip cannot know
it: torch declares no numpy requirement, so a fresh install on Python 3.10 gets
numpy 2. Importing such a torch beside numpy 2 prints numpy's own 30-line "compiled
using NumPy 1.x" warning with a stack dump before anything of ours can speak
(numpy 2.0 migration guide, "NumPy 2.0 ABI"). So the versions are read from the
installed packages' metadata, which imports neither, and a mismatch is one line.
"""

import re
import sys
from typing import Optional, Tuple

from undercap.errors import UndercapError

# The first torch release built against numpy 2 (and so working with both majors).
TORCH_NUMPY2_SINCE = (2, 3)


def _release(version: str) -> Tuple[int, ...]:
    """'2.1.0+cu121' -> (2, 1, 0); '2.0.0a0+ec3941ad.nv23.02' (a Jetson wheel) -> (2, 0, 0)."""
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def _installed(name: str) -> Optional[str]:
    if sys.version_info < (3, 8):  # JetPack 4.6: numpy 2 needs Python >= 3.9, no clash
        return None
    from importlib.metadata import PackageNotFoundError, version  # novermin

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def torch_numpy_mismatch(torch_version: Optional[str], numpy_version: Optional[str]) -> str:
    """The one error line for a torch that cannot use this numpy, or '' when they fit."""
    if not torch_version or not numpy_version:
        return ""
    torch_rel, numpy_rel = _release(torch_version), _release(numpy_version)
    if not (torch_rel and numpy_rel) or numpy_rel[0] < 2 or torch_rel[:2] >= TORCH_NUMPY2_SINCE:
        return ""
    return (
        f"torch {torch_version} cannot use the installed numpy {numpy_version} (it was built "
        "against numpy 1.x); torch builds before 2.3 need numpy 1.x: pip install 'numpy<2'"
    )


def check_torch_numpy() -> None:
    """Raise the one-line error before torch is imported, where the versions clash."""
    line = torch_numpy_mismatch(_installed("torch"), _installed("numpy"))
    if line:
        raise UndercapError(line)
