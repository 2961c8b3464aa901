"""The models undercap trains: a registry of facts by name, their factories, weights
and measured workloads.

Importing this package is torch-free (the registry names factories by import path);
`build_model`, `workload_of` and the weights helpers import torch when called.
"""

from typing import Any, Dict, Sequence

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


def build_model(name: str, *, num_classes: int, input_shape: Sequence[int]) -> Any:
    """A freshly initialised model. Images: input_shape (C, H, W); next-token
    models: input_shape (context,) and num_classes = vocabulary size."""
    return model_spec(name).build(num_classes=num_classes, input_shape=input_shape)


def workload_of(model: Any, name: str, input_shape: Sequence[int], task: Any = None) -> Any:
    from undercap.models.workload import workload_of as _workload_of

    return _workload_of(model, name, input_shape, task)


def initial_model(*args: Any, **kwargs: Any) -> Any:
    from undercap.models.weights import initial_model as _initial_model

    return _initial_model(*args, **kwargs)


def load_weights(model: Any, path: Any) -> Any:
    from undercap.models.weights import load_weights as _load_weights

    return _load_weights(model, path)


def save_weights(model: Any, path: Any, meta: Dict[str, Any]) -> Any:
    from undercap.models.weights import save_weights as _save_weights

    return _save_weights(model, path, meta)
