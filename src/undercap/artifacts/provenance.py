"""Provenance recorded in every artifact: versions, host, git revision, time."""

import datetime as _dt
import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Optional

from undercap import __version__
from undercap._compat import run_captured


@lru_cache(maxsize=1)
def git_revision() -> Optional[str]:
    """The git revision of the undercap source tree, if it is a checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = run_captured(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, timeout=2, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(**extra: Any) -> Dict[str, Any]:
    """A JSON-able provenance block; callers add device, seed, etc. via `extra`."""
    info: Dict[str, Any] = {
        "undercap_version": __version__,
        "git_revision": git_revision(),
        "python": platform.python_version(),
        "host": platform.node(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if "torch" in sys.modules:  # only record torch's version if it is already loaded
        info["torch_version"] = sys.modules["torch"].__version__
    info.update(extra)
    return info
