"""The models undercap trains: a registry of facts by name, their factories, weights
and measured workloads.

Importing this package is torch-free (the registry names factories by import path);
`build_model` imports torch when called, the names in _LAZY when first used (PEP 562).
"""

import importlib
from typing import Any, Sequence

from undercap._compat import lazy_module_attributes
from undercap.models.registry import MODEL_NAMES, TASKS, ModelSpec, model_spec

__all__ = [
    "MODEL_NAMES",
    "TASKS",
    "ModelSpec",
    "build_model",
    "initial_model",
    "load_weights",
    "model_spec",
    "save_weights",
    "workload_of",
]
#: the names loaded from their module on first use
_LAZY = {
    "workload_of": "undercap.models.workload",
    "initial_model": "undercap.models.weights",
    "load_weights": "undercap.models.weights",
    "save_weights": "undercap.models.weights",
}


def build_model(name: str, *, num_classes: int, input_shape: Sequence[int]) -> Any:
    """A freshly initialised model. Images: input_shape (C, H, W); next-token
    models: input_shape (context,) and num_classes = vocabulary size."""
    return model_spec(name).build(num_classes=num_classes, input_shape=input_shape)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'undercap.models' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


lazy_module_attributes(__name__, __getattr__)  # Python 3.6 (JetPack 4.6): no PEP 562
