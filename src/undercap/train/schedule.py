"""Deprecated (0.3.0): the schedule and live source moved to undercap.train.cap, the
progress model and re-selection to undercap.train.session.follow. Their names still
load from here, with a DeprecationWarning, until 0.4."""

import importlib
import warnings
from typing import Any

from undercap._compat import lazy_module_attributes

_MOVED = {
    **dict.fromkeys(("PowerSchedule", "LiveSource", "load_schedule"), "undercap.train.cap"),
    **dict.fromkeys(
        ("OperatingPoint", "Reselector", "reselector_for", "progress_fraction"),
        "undercap.train.session.follow",
    ),
}


def __getattr__(name: str) -> Any:
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module 'undercap.train.schedule' has no attribute {name!r}")
    warnings.warn(f"undercap.train.schedule.{name} moved to {where}.{name}", DeprecationWarning, 2)
    return getattr(importlib.import_module(where), name)


lazy_module_attributes(__name__, __getattr__)  # Python 3.6 (JetPack 4.6): no PEP 562
