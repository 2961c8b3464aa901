"""Users' datasets by import path: `py:package.module:factory`, `py:path/to/file.py:factory`.

The factory returns `(train, test)`: two map-style torch datasets (`__len__` and
`__getitem__`) of `(input, label)` pairs or of dicts (`{"input_ids", "labels"}`,
models/outputs.py; a Hugging Face `datasets.Dataset` in torch format is one). They are read once into tensors, like every
built-in format, so training, estimation and profiling see one in-memory form
(data.base.Splits). What the pairs hold decides the task:

* classification ("samples"): an input tensor of any shape and one integer class
  label per input;
* next-token ("tokens"): integer token ids in and a label per position, the same shape
  as the input (a character or token language model), scored per token. A dict item
  whose labels are its input ids (or that has none) is a Hugging Face causal-LM item:
  its labels are shifted to the next token, the last position -100 (not scored).

The class count is the dataset's `num_classes` attribute, else `len(classes)`, else
1 + the largest label. Every problem (factory missing or raising, not a pair of
datasets, an empty split, items that are not (input, label) pairs, inputs of
different shapes, labels that are not integers or are out of range) is one
DataError line naming the factory and what was expected.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from undercap.data.base import Splits
from undercap.errors import DataError, UndercapError
from undercap.models.outputs import split_item

PREFIX = "py:"
IGNORE_INDEX = -100  # cross-entropy's and Hugging Face's label for "not scored"


def load_user_data(
    spec: str,
    *,
    input_shape: Optional[Sequence[int]] = None,
    seed: int = 0,
    limit: Optional[int] = None,
) -> Splits:
    """Load `py:...` data as Splits (see module docstring)."""
    from undercap.models.user import call_with_supported, load_callable

    text = spec[len(PREFIX) :]
    try:
        out = call_with_supported(load_callable(text, "dataset"), text, "dataset")
    except UndercapError as e:
        raise DataError(str(e)) from e
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise DataError(
            f"dataset {text!r} returned a {type(out).__name__}; expected a pair "
            "(train, test) of map-style torch datasets"
        )
    x_tr, y_tr = _read(out[0], text, "train")
    x_te, y_te = _read(out[1], text, "test")
    kind = _kind(x_tr, y_tr, text)
    if x_te.shape[1:] != x_tr.shape[1:] or y_te.shape[1:] != y_tr.shape[1:]:
        raise DataError(
            f"dataset {text!r}: test items have shapes {tuple(x_te.shape[1:])} -> "
            f"{tuple(y_te.shape[1:])}, train items {tuple(x_tr.shape[1:])} -> "
            f"{tuple(y_tr.shape[1:])}; both splits must hold the same kind of items"
        )
    classes = _num_classes(out, y_tr, y_te, text)
    x_tr, x_te = _map_shape(x_tr, x_te, input_shape, text)
    tr, te = _subset(len(y_tr), seed, limit), _subset(len(y_te), seed + 1, _test_limit(limit))
    return Splits(spec, kind, x_tr[tr], y_tr[tr], x_te[te], y_te[te], classes)


def _read(ds: Any, text: str, split: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Every (input, label) pair of a map-style dataset, stacked into two tensors."""
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise DataError(
            f"dataset {text!r}: the {split} split is a {type(ds).__name__}, not a map-style "
            "dataset (it needs __len__ and __getitem__)"
        )
    n = len(ds)
    if n == 0:
        raise DataError(f"dataset {text!r}: the {split} split is empty")
    xs: List[torch.Tensor] = []
    ys: List[torch.Tensor] = []
    for i in range(n):
        try:
            x, y, causal = split_item(ds[i])
        except TypeError as e:
            raise DataError(
                f"dataset {text!r}: {split}[{i}] is {e}; expected an (input, label) pair or "
                "a dict such as {'input_ids', 'labels'}"
            ) from e
        xs.append(_tensor(x, text, f"{split}[{i}] input"))
        label = _tensor(y, text, f"{split}[{i}] label")
        ys.append(_shifted(label) if causal else label)
    return _stack(xs, text, split, "inputs"), _labels(_stack(ys, text, split, "labels"), text)


def _shifted(ids: torch.Tensor) -> torch.Tensor:
    """A causal-LM item's labels as next-token labels: position t is scored on token
    t + 1 (what the HF model's own shift does), the last position ignored (-100)."""
    out = torch.full_like(ids, IGNORE_INDEX)
    out[..., :-1] = ids[..., 1:]
    return out


def _tensor(value: Any, text: str, where: str) -> torch.Tensor:
    try:
        return torch.as_tensor(np.asarray(value) if not torch.is_tensor(value) else value)
    except (TypeError, ValueError, RuntimeError) as e:
        raise DataError(
            f"dataset {text!r}: {where} is a {type(value).__name__}, not an array or tensor"
        ) from e


def _stack(items: List[torch.Tensor], text: str, split: str, what: str) -> torch.Tensor:
    shapes = {tuple(t.shape) for t in items}
    if len(shapes) > 1:
        some = sorted(shapes)[:3]
        raise DataError(f"dataset {text!r}: {split} {what} have different shapes, e.g. {some}")
    return torch.stack(items)


def _labels(y: torch.Tensor, text: str) -> torch.Tensor:
    if y.is_floating_point():
        if not torch.equal(y, y.round()):
            raise DataError(f"dataset {text!r}: labels must be integer class indices")
    elif y.dtype == torch.bool or y.is_complex():
        raise DataError(f"dataset {text!r}: labels must be integer class indices, not {y.dtype}")
    y = y.long()
    scored = y[y != IGNORE_INDEX]
    if scored.numel() and int(scored.min()) < 0:
        raise DataError(
            f"dataset {text!r}: labels must be >= 0 (or {IGNORE_INDEX}: not scored), "
            f"found {int(scored.min())}"
        )
    return y


def _kind(x: torch.Tensor, y: torch.Tensor, text: str) -> str:
    if y.dim() == 1:
        return "samples"
    if y.shape == x.shape and not x.is_floating_point():
        return "tokens"
    raise DataError(
        f"dataset {text!r}: labels of shape {tuple(y.shape[1:])} per item; expected one class "
        "label per input, or token ids in and a label per position (same shape as the input)"
    )


def _num_classes(out: Any, y_tr: torch.Tensor, y_te: torch.Tensor, text: str) -> int:
    """The declared class count (checked against the labels), else 1 + the largest."""
    largest = int(max(y_tr.max(), y_te.max()))
    declared = getattr(out[0], "num_classes", None)
    if declared is None and hasattr(out[0], "classes"):
        declared = len(out[0].classes)
    if declared is None:
        return largest + 1
    if largest >= int(declared):
        raise DataError(
            f"dataset {text!r}: label {largest} is out of range for {int(declared)} classes "
            "(labels must be 0 .. num_classes - 1)"
        )
    return int(declared)


def _map_shape(
    x_tr: torch.Tensor, x_te: torch.Tensor, shape: Optional[Sequence[int]], text: str
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Inputs as given, or images mapped to the requested (C, H, W) like the built-ins."""
    if shape is None or tuple(shape) == tuple(x_tr.shape[1:]):
        return x_tr, x_te
    if len(tuple(shape)) == 3 and x_tr.dim() == 4 and x_tr.is_floating_point():
        from undercap.data.transforms import map_shape

        def mapped(x: torch.Tensor) -> torch.Tensor:
            x = map_shape(x, tuple(shape))  # type: ignore[arg-type]
            # gray -> colour by replication, as the built-in loaders do (a view)
            return x.expand(-1, int(shape[0]), -1, -1) if x.shape[1] == 1 else x  # type: ignore[index]

        return mapped(x_tr), mapped(x_te)
    raise DataError(
        f"dataset {text!r}: inputs have shape {tuple(x_tr.shape[1:])}, not the requested "
        f"{tuple(shape)} (only float images (C, H, W) are resized)"
    )


def _subset(n: int, seed: int, limit: Optional[int]) -> torch.Tensor:
    """All indices, or a seeded random subset of `limit`, in ascending order."""
    if limit is None or limit >= n:
        return torch.arange(n)
    idx = np.sort(np.random.default_rng(seed).permutation(n)[:limit])
    return torch.from_numpy(idx)


def _test_limit(limit: Optional[int]) -> Optional[int]:
    return None if limit is None else max(limit // 4, 1)
