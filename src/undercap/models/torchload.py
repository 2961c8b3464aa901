"""torch.load for files of tensors and plain data only: checkpoints and weights.

torch >= 1.13 has `torch.load(weights_only=True)`, which refuses to unpickle anything
but tensors, storages and plain containers (a pickle can run arbitrary code). JetPack
4.6's torch 1.10 (the last for the Jetson Nano and TX2) has no such flag; there the same
refusal is an unpickler that finds only the globals a tensor file needs (torch.load
takes a `pickle_module`; torch's own _weights_only_unpickler allows the same kind).
"""

import pickle
import types
from pathlib import Path
from typing import Any, Union

import torch

#: (module, name) a file of tensors and plain data may name; storages are torch.*Storage
_ALLOWED = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "Size"),
    ("torch", "device"),
}


class _TensorsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "torch" and name.endswith("Storage")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a weights file")


_TENSORS_ONLY = types.ModuleType("undercap_tensors_only")  # torch.load reads its __name__
_TENSORS_ONLY.Unpickler = _TensorsOnly  # type: ignore[attr-defined]
_TENSORS_ONLY.load = pickle.load  # type: ignore[attr-defined]


def load_tensors(path: Union[str, Path]) -> Any:
    """What `path` holds, on the CPU, refusing anything but tensors and plain data."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError as e:  # torch < 1.13: no weights_only
        if "weights_only" not in str(e):
            raise
    return torch.load(path, map_location="cpu", pickle_module=_TENSORS_ONLY)
