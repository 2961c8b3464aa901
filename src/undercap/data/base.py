"""The in-memory form every loader returns: tensors for train and test splits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class Splits:
    """Train/test tensors for one dataset.

    Images: x float32 (N, C, H, W) normalised, y int64 (N,) class index.
    Text (character models): x int64 (N, context) token ids, y int64 (N, context)
    next-token ids; accuracy is per-character.
    Users' data (`py:` specs): kind "samples" (any input shape, one class label per
    input) or "tokens" (token ids in, a next-token label per position).
    """

    name: str
    kind: str  # "image", "text", "samples" or "tokens"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int  # classes for images, vocabulary size for text
    vocab: Optional[str] = None  # the character vocabulary (text only), index -> char

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def task(self) -> str:
        """ "next-token" (a label per position, scored per token) or "classification"."""
        return "next-token" if self.kind in ("text", "tokens") else "classification"

    @property
    def accuracy_kind(self) -> str:
        """What one unit of accuracy counts: a character, a token or a sample."""
        return {"text": "character", "tokens": "token"}.get(self.kind, "sample")
