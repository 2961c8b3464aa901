"""STEP 4: training to the target accuracy on the device (paper Sec. 4.3, 5).

Its parts, in the order a run meets them:

* the spec and the run: spec.py (`Plan`: how a run trains; `TrainSpec`: the plan at
  the device's choice; `RunOptions`: how the run is kept), cap.py (the cap, one value
  from the flag to the guard), runner.py (`train`: the run, checkpointed by
  checkpoint.py, logged by evallog.py);
* the built-in loop: loop/ (the `Trainer` the r(b) estimate shares, its evaluation
  plan, scoring, the user's optimizer, reproducibility);
* the device session: session/ (time, energy and power accounted per step, the power
  guard, the follower of a cap that changes);
* loops of your own: api.py (`capped()`, the handle every loop trains with, undercap's
  own included), callbacks.py and the Hugging Face and Lightning callbacks (hf.py,
  lightning.py).

The names below load on first use (PEP 562): `undercap.train.spec` and
`undercap.train.cap` stay torch-free for the commands that only plan a run.
"""

import importlib
from typing import Any

from undercap._compat import lazy_module_attributes

_API = {
    "train": "undercap.train.runner",
    "train_on_device": "undercap.train.runner",
    "Plan": "undercap.train.spec",
    "RunOptions": "undercap.train.spec",
    "TrainSpec": "undercap.train.spec",
    "capped": "undercap.train.api",
    "FixedCap": "undercap.train.cap",
    "PowerSchedule": "undercap.train.cap",
    "LiveSource": "undercap.train.cap",
    "cap_from": "undercap.train.cap",
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
