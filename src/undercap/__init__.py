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

#: the module that defines each public name
_MODULES = {
    "undercap.devices": ("open_device", "discover", "controlled", "locked"),
    "undercap.devices.sampler": ("PowerSampler",),
    "undercap.artifacts.profile": ("Profile", "load_profile", "save_profile"),
    "undercap.artifacts.efficiency": ("Efficiency", "load_efficiency", "save_efficiency"),
    "undercap.artifacts.selection": ("Selection", "load_selection", "save_selection"),
    "undercap.artifacts.train_result": ("TrainResult", "load_train_result"),
    "undercap.profile": ("ProfileSettings", "run_profile"),
    "undercap.estimate": ("EstimateConfig",),
    "undercap.select": ("select_ours", "oracle", "baseline1", "baseline2", "safe_freq_mhz"),
    "undercap.train": ("train_on_device",),
    "undercap.train.api": ("capped", "CappedResult"),
    "undercap.recipes.selection": ("build_selection",),
    "undercap.recipes.run": ("RunConfig", "run"),
    "undercap.recipes.compare": ("CompareConfig", "run_comparison"),
    "undercap.data.spec": ("DataSpec",),
    "undercap.models": ("model_spec",),
}
#: public name -> its module ("module:attr" where the names differ)
_API = {name: module for module, names in _MODULES.items() for name in names}
_API["estimate_r"] = "undercap.estimate:estimate"  # `undercap.estimate` is the package

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
