"""Users' datasets by import path: `py:package.module:factory`, `py:path/to/file.py:factory`.

The factory returns `(train, test)`, two map-style torch datasets of `(input, label)`
pairs or dicts (models/outputs.py; data/items.py reads their extras), read once into
tensors (data.base.Splits). The items decide the kind: "samples" (a float input, one
label), "sequences" (token ids, one label) or "tokens" (token ids, a label per
position). Every problem is one DataError line naming the factory and what was
expected. See docs/guides/own-code.md and docs/guides/hugging-face.md.
"""

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from undercap.data.base import Splits
from undercap.data.items import Items, pad_id, task_of
from undercap.data.transforms import map_shape
from undercap.errors import DataError, UndercapError
from undercap.models.outputs import split_item
from undercap.models.user import call_with_supported, load_callable

PREFIX = "py:"
IGNORE_INDEX = -100  # cross-entropy's and Hugging Face's label for "not scored"


def load_user_data(
    spec: str,
    *,
    input_shape: Optional[Sequence[int]] = None,
    seed: int = 0,
    limit: Optional[int] = None,
    task: Optional[str] = None,
) -> Splits:
    """Load `py:...` data as Splits (see module docstring); `task` names the task
    where the items cannot say it (models/tasks.py)."""
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
    tr, te = _read(out[0], text, "train"), _read(out[1], text, "test")
    named = task_of(tr, te, task, text)
    x_tr, y_tr = _arrange(tr, named, text)
    x_te, y_te = _arrange(te, named, text)
    kind = "tokens" if named == "seq2seq" else _kind(x_tr, y_tr, text)
    if x_te.shape[1:] != x_tr.shape[1:] or y_te.shape[1:] != y_tr.shape[1:]:
        raise DataError(
            f"dataset {text!r}: test items have shapes {tuple(x_te.shape[1:])} -> "
            f"{tuple(y_te.shape[1:])}, train items {tuple(x_tr.shape[1:])} -> "
            f"{tuple(y_tr.shape[1:])}; both splits must hold the same kind of items"
        )
    classes = _num_classes(out, y_tr, y_te, text)
    x_tr, x_te = _map_shape(x_tr, x_te, input_shape, text)
    pad = pad_id(tr, te, text)
    i_tr = _subset(len(y_tr), seed, limit)
    i_te = _subset(len(y_te), seed + 1, None if limit is None else max(limit // 4, 1))
    x_tr, y_tr, x_te, y_te = x_tr[i_tr], y_tr[i_tr], x_te[i_te], y_te[i_te]
    return Splits(spec, kind, x_tr, y_tr, x_te, y_te, classes, task_name=named, pad_token_id=pad)


def _read(ds: Any, text: str, split: str) -> Items:
    """Every item of a map-style dataset, split into inputs, labels and extras."""
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise DataError(
            f"dataset {text!r}: the {split} split is a {type(ds).__name__}, not a map-style "
            "dataset (it needs __len__ and __getitem__)"
        )
    n = len(ds)
    if n == 0:
        raise DataError(f"dataset {text!r}: the {split} split is empty")
    items = Items(split)
    for i in range(n):
        item = ds[i]
        try:
            x, y, causal = split_item(item)
        except TypeError as e:
            raise DataError(
                f"dataset {text!r}: {split}[{i}] is {e}; expected an (input, label) pair or "
                "a dict such as {'input_ids', 'labels'}"
            ) from e
        items.xs.append(_tensor(x, text, f"{split}[{i}] input"))
        items.ys.append(_tensor(y, text, f"{split}[{i}] label"))
        items.causal.append(causal)
        items.read_extras(item, i, text)
    return items


def _arrange(items: Items, task: Optional[str], text: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Inputs and labels stacked: causal-LM labels shifted (a next-token task only);
    a seq2seq item's input ids and labels packed as (2, T), the labels padded with
    -100 to the inputs' length (models/hfinputs.py unpacks them for the model)."""
    shift = task == "next-token" and all(items.causal)
    ys = [_shifted(y) if shift else y for y in items.ys]
    x = _stack(items.xs, text, items.split, "inputs")
    y = _labels(_stack(ys, text, items.split, "labels"), text)
    if task != "seq2seq":
        return x, y
    if x.dim() != 2 or y.dim() != 2 or y.shape[1] > x.shape[1]:
        raise DataError(
            f"dataset {text!r}: seq2seq items need input_ids and labels of one dimension, "
            f"the labels no longer than the inputs (got {tuple(x.shape[1:])} and "
            f"{tuple(y.shape[1:])}): pad input_ids to the labels' length"
        )
    y = torch.cat([y, torch.full((len(y), x.shape[1] - y.shape[1]), IGNORE_INDEX)], 1)
    return torch.stack([x, y], 1), y


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
    if y.dim() == 1:  # integer inputs are token ids (a float model would not take them)
        return "samples" if x.is_floating_point() else "sequences"
    if y.shape == x.shape and not x.is_floating_point():
        return "tokens"
    raise DataError(
        f"dataset {text!r}: labels of shape {tuple(y.shape[1:])} per item; expected one class "
        "label per input, or token ids in and a label per position (same shape as the input)"
    )


def _num_classes(out: Any, y_tr: torch.Tensor, y_te: torch.Tensor, text: str) -> int:
    """The train split's `num_classes` or `len(classes)` (checked), else 1 + the largest label."""
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
    if not (len(tuple(shape)) == 3 and x_tr.dim() == 4 and x_tr.is_floating_point()):
        raise DataError(
            f"dataset {text!r}: inputs have shape {tuple(x_tr.shape[1:])}, not the requested "
            f"{tuple(shape)} (only float images (C, H, W) are resized)"
        )
    mapped = [map_shape(x, tuple(shape)) for x in (x_tr, x_te)]  # type: ignore[arg-type]
    # gray -> colour by replication, as the built-in loaders do (a view)
    x_tr, x_te = (x.expand(-1, int(shape[0]), -1, -1) if x.shape[1] == 1 else x for x in mapped)
    return x_tr, x_te


def _subset(n: int, seed: int, limit: Optional[int]) -> torch.Tensor:
    """All indices, or a seeded random subset of `limit`, in ascending order."""
    if limit is None or limit >= n:
        return torch.arange(n)
    idx = np.sort(np.random.default_rng(seed).permutation(n)[:limit])
    return torch.from_numpy(idx)
