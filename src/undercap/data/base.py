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
    """

    name: str
    kind: str  # "image" or "text"
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
