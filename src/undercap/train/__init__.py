"""STEP 4: training to the target accuracy on the device (paper Sec. 4.3, 5).

Its parts (the map: docs/development.md): the spec and the run (spec.py, cap.py,
runner.py, checkpoint.py, evallog.py), the built-in loop the r(b) estimate shares
(loop/), the device session (session/: time, energy, the power guard, a cap that
changes) and loops of your own (api.py's `capped()`, the handle every loop trains with;
callbacks.py, hf.py, lightning.py).

The names below load on first use (PEP 562): `undercap.train.spec` and
`undercap.train.cap` stay torch-free for the commands that only plan a run.
"""

import importlib
from typing import Any

from undercap._compat import lazy_module_attributes

_API = {
    **dict.fromkeys(("train", "train_on_device"), "undercap.train.runner"),
    **dict.fromkeys(("Plan", "RunOptions", "TrainSpec"), "undercap.train.spec"),
    "capped": "undercap.train.api",
    **dict.fromkeys(("FixedCap", "PowerSchedule", "LiveSource", "cap_from"), "undercap.train.cap"),
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    where = _API.get(name)
    if where is None:
        raise AttributeError(f"module 'undercap.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


lazy_module_attributes(__name__, __getattr__)  # Python 3.6 (JetPack 4.6): no PEP 562
