"""undercap: the fastest way to a target accuracy under a power cap.

Implements "Accelerated Training on Low-Power Edge Devices" (Ahmed et al., TMLR 2025,
arXiv 2502.18323): pick the batch size and GPU frequency that minimise
time-to-accuracy T(b, f) = t(b, f) * N(b) subject to P(b, f) <= P_max.

The pipeline, one package per stage:
    devices   open a GPU by name, lock its clock, sample its power, restore it
    profile   STEP 1  t(b, f) and P(b, f) measured on the device   (Sec. 4.1)
    estimate  STEP 2  r(b) = N(b) / N(b_max) on a proxy dataset    (Sec. 4.2)
    select    STEP 3  Algorithm 1, baselines, oracle: pure functions (Sec. 4.3)
    train     STEP 4  train to the target on the device under the cap
    recipes   `run` (all four steps) and `compare` (against the baselines)

Importing the package is cheap and torch-free: the names below are loaded on first
use (PEP 562), so `import undercap` and `undercap select` never import torch.
"""

import importlib
from typing import Any, List

from undercap._compat import lazy_module_attributes

__version__ = "0.3.0"

#: public name -> the module that defines it ("module:attr" where the names differ)
_API = {
    # devices
    "open_device": "undercap.devices",
    "discover": "undercap.devices",
    "controlled": "undercap.devices",
    "locked": "undercap.devices",
    "PowerSampler": "undercap.devices.sampler",
    # artifacts
    "Profile": "undercap.artifacts.profile",
    "load_profile": "undercap.artifacts.profile",
    "save_profile": "undercap.artifacts.profile",
    "Efficiency": "undercap.artifacts.efficiency",
    "load_efficiency": "undercap.artifacts.efficiency",
    "save_efficiency": "undercap.artifacts.efficiency",
    "Selection": "undercap.artifacts.selection",
    "load_selection": "undercap.artifacts.selection",
    "save_selection": "undercap.artifacts.selection",
    "TrainResult": "undercap.artifacts.train_result",
    "load_train_result": "undercap.artifacts.train_result",
    # the four steps
    "ProfileSettings": "undercap.profile",
    "run_profile": "undercap.profile",
    "EstimateConfig": "undercap.estimate",
    "estimate_r": "undercap.estimate:estimate",  # `undercap.estimate` is the package
    "select_ours": "undercap.select",
    "oracle": "undercap.select",
    "baseline1": "undercap.select",
    "baseline2": "undercap.select",
    "safe_freq_mhz": "undercap.select",
    "train_on_device": "undercap.train",
    "capped": "undercap.train.api",
    "CappedResult": "undercap.train.api",
    # recipes
    "build_selection": "undercap.recipes.selection",
    "RunConfig": "undercap.recipes.run",
    "run": "undercap.recipes.run",
    "CompareConfig": "undercap.recipes.compare",
    "run_comparison": "undercap.recipes.compare",
    # data and models
    "DataSpec": "undercap.data.spec",
    "model_spec": "undercap.models",
}

__all__ = sorted(_API) + ["__version__"]


def __getattr__(name: str) -> Any:
    where = _API.get(name)
    if where is None:
        raise AttributeError(f"module 'undercap' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> List[str]:
    return __all__


lazy_module_attributes(__name__, __getattr__)  # Python 3.6 (JetPack 4.6): no PEP 562
