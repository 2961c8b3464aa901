"""The items of a user's `py:` dataset before they become tensors (data/user.py), and
what the Hugging Face-style ones say beyond input and label.

A dict item (`{"input_ids", "attention_mask", "token_type_ids", "labels"}`, as a
tokenizer gives it) tells the task (`task_of`) and the padding id (`pad_id`), from which
the CLI, which keeps token ids only, rebuilds a Hugging Face model's attention mask
(models/hfinputs.py). See docs/guides/hugging-face.md.
"""

from collections.abc import Mapping
from typing import Any, List, Optional

import numpy as np
import torch

from undercap.errors import DataError, UndercapError
from undercap.models.tasks import task_named


class Items:
    """One split's inputs, labels and extras, as read item by item."""

    def __init__(self, split: str) -> None:
        self.split = split
        self.xs: List[torch.Tensor] = []
        self.ys: List[torch.Tensor] = []
        self.causal: List[bool] = []
        self.masks: List[Optional[torch.Tensor]] = []
        self.dicts = True  # every item a dict (Hugging Face style)

    def read_extras(self, item: Any, i: int, text: str) -> None:
        """The attention mask of a dict item; non-zero token types are an error."""
        if not isinstance(item, Mapping):
            self.dicts = False
            self.masks.append(None)
            return
        mask = item.get("attention_mask")
        self.masks.append(None if mask is None else torch.as_tensor(np.asarray(mask)))
        types = item.get("token_type_ids")
        if types is not None and bool(np.asarray(types).any()):
            raise DataError(
                f"dataset {text!r}: {self.split}[{i}] has token_type_ids other than 0 (a "
                "sentence pair); the CLI feeds token ids and the attention mask only: train "
                "sentence pairs with the Trainer callback (undercap.train.hf)"
            )


def task_of(train: Items, test: Items, named: Optional[str], text: str) -> Optional[str]:
    """The named task (checked), else what the items say: "next-token" for causal-LM
    items; dict items of token ids with a label per position "token-classification"
    (masked-LM data looks the same), of another length "seq2seq"; else None."""
    if named:
        try:
            return task_named(named).name
        except UndercapError as e:
            raise DataError(f"dataset {text!r}: {e}") from e
    both = (train, test)
    if all(all(s.causal) for s in both):
        return "next-token"
    if not all(s.dicts for s in both):
        return None  # (input, label) pairs: their shapes decide (data/user.py _kind)
    x, y = train.xs[0], train.ys[0]
    if y.dim() == 0 or x.is_floating_point():
        return None
    return "token-classification" if y.shape == x.shape else "seq2seq"


def pad_id(train: Items, test: Items, text: str) -> Optional[int]:
    """The one token id under every zero of the attention masks; None without
    padding. Padding with several ids, or with an id real tokens use, is an error."""
    padded, real = set(), set()
    for items in (train, test):
        for x, mask in zip(items.xs, items.masks):
            if mask is None:
                continue
            if mask.shape != x.shape:
                raise DataError(
                    f"dataset {text!r}: an attention_mask of shape {tuple(mask.shape)} for "
                    f"input_ids of shape {tuple(x.shape)}"
                )
            padded.update(int(v) for v in x[mask == 0].unique())
            real.update(int(v) for v in x[mask != 0].unique())
    if not padded:
        return None
    if len(padded) > 1 or padded & real:
        raise DataError(
            f"dataset {text!r}: the attention masks hide token ids {sorted(padded)[:5]}"
            f"{' (also used by real tokens)' if padded & real else ''}; the CLI rebuilds "
            "the mask from one padding id: pad with one id that no real token uses"
        )
    return padded.pop()
