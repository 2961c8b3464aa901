"""Model outputs and batches as libraries produce them, recognised by shape (the table
is in docs/guides/own-code.md, "Model outputs and batches").

Nothing here imports transformers or lightning (nor torch): a tensor is anything with
`.shape` and `.dim()`, so the core keeps no dependency on those libraries.
"""

from collections.abc import Mapping
from typing import Any, Optional, Tuple

#: keys a dict batch keeps its inputs and labels under (HF conventions first)
INPUT_KEYS = ("input_ids", "pixel_values", "input_values", "inputs", "input", "x")
LABEL_KEYS = ("labels", "label", "targets", "target", "y")


def is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and callable(getattr(value, "dim", None))


def logits_of(out: Any) -> Any:
    """The logits in a model's output (see module docstring); a tensor itself is its
    own logits. Raises TypeError when there are none."""
    if is_tensor(out):
        return out
    found = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
    if is_tensor(found):
        return found
    if isinstance(out, (tuple, list)):
        # (loss, logits, ...) when a 0-dim loss leads, else (logits, ...)
        for item in out:
            if is_tensor(item) and item.dim() > 0:
                return item
    raise TypeError(
        f"no logits in a {type(out).__name__} (expected a tensor, a tuple, "
        "a dict with 'logits' or an object with .logits)"
    )


def loss_of(out: Any) -> Optional[Any]:
    """The loss a model returned itself (Hugging Face models do when given labels), or
    None: a `.loss`/"loss" scalar, or the 0-dim tensor leading a tuple."""
    if is_tensor(out):
        return None
    if isinstance(out, (tuple, list)):
        found = out[0] if out else None
    else:
        found = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    return found if is_tensor(found) and found.dim() == 0 else None


def batch_len(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor (a tensor, a
    tuple/list such as (x, y), or a dict such as {"input_ids", "labels"})."""
    if is_tensor(batch):
        if batch.dim() == 0:
            raise TypeError("a 0-dim tensor is not a batch")
        return int(batch.shape[0])
    if isinstance(batch, Mapping):
        items = [batch[k] for k in INPUT_KEYS if k in batch] + list(batch.values())
    elif isinstance(batch, (tuple, list)):
        items = list(batch)
    else:
        items = [getattr(batch, k, None) for k in INPUT_KEYS]
    for item in items:
        if is_tensor(item) and item.dim() > 0:
            return int(item.shape[0])
        if isinstance(item, (Mapping, tuple, list)) and item:
            return batch_len(item)
    raise TypeError(f"cannot tell the batch size of a {type(batch).__name__}")


def split_item(item: Any) -> Tuple[Any, Any, bool]:
    """(input, label, causal) of one dataset item: an (input, label) pair, or a dict
    with one of INPUT_KEYS and one of LABEL_KEYS. `causal` is True for a Hugging Face
    causal-LM item, whose labels are its input ids (or no labels at all): the model
    shifts them itself, undercap's data holds next-token labels already shifted."""
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return item[0], item[1], False
    if not isinstance(item, Mapping):
        raise TypeError(f"a {type(item).__name__}; expected an (input, label) pair or a dict")
    x_key = next((k for k in INPUT_KEYS if k in item), None)
    if x_key is None:
        raise TypeError(
            f"a dict without inputs (keys {sorted(item)}; expected one of {INPUT_KEYS})"
        )
    y_key = next((k for k in LABEL_KEYS if k in item), None)
    if y_key is None:
        if x_key != "input_ids":
            raise TypeError(
                f"a dict without labels (keys {sorted(item)}; expected one of {LABEL_KEYS})"
            )
        return item[x_key], item[x_key], True
    causal = x_key == "input_ids" and _same_ids(item[x_key], item[y_key])
    return item[x_key], item[y_key], causal


def _same_ids(x: Any, y: Any) -> bool:
    """Labels that are the input ids where not ignored (-100: HF's ignore index)."""
    try:
        xs, ys = list(_flat(x)), list(_flat(y))
    except TypeError:
        return False
    return len(xs) == len(ys) and all(b == -100 or a == b for a, b in zip(xs, ys))


def _flat(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    else:
        yield int(value)
