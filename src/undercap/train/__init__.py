"""STEP 4: training to the target accuracy on the device (paper Sec. 4.3, 5).

loop.py is the training loop estimation shares; runner.py runs it on a device with
the frequency locked, power sampled, the guard (guard.py) holding the cap (cap.py)
and checkpoints (checkpoint.py) that survive a kill; spec.py is what a run trains
and how it is kept, setup.py builds it so it repeats the estimate's procedure
exactly.

The names below load on first use (PEP 562): `undercap.train.spec` and
`undercap.train.cap` stay torch-free for the commands that only plan a run.
"""

import importlib
from typing import Any

from undercap._compat import lazy_module_attributes

_API = {
    "train": "undercap.train.runner",
    "train_on_device": "undercap.train.runner",
    "RunOptions": "undercap.train.spec",
    "TrainSpec": "undercap.train.spec",
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
