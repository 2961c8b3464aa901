"""The in-memory form every loader returns: tensors for train and test splits."""

import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

import torch


@dataclass(frozen=True)
class Splits:
    """Train/test tensors for one dataset.

    Images: x float32 (N, C, H, W) normalised, y int64 (N,) class index. Text (character
    models): x int64 (N, context) token ids, y int64 (N, context) next-token ids;
    accuracy is per-character. Users' `py:` data: the kinds of data/user.py, `task_name`
    where the loader knows the task (`--task`, or Hugging Face items' labels), and
    `pad_token_id`, which rebuilds a Hugging Face model's attention mask (models/hfinputs.py).
    """

    name: str
    kind: str  # "image", "text", "samples", "sequences" or "tokens"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int  # classes for images, vocabulary size for text
    vocab: Optional[str] = None  # the character vocabulary (text only), index -> char
    task_name: Optional[str] = None  # the task, where the loader knows it
    pad_token_id: Optional[int] = None  # padding under attention_mask == 0 (py: data)

    @property
    def input_shape(self) -> Tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def task(self) -> str:
        """The task the data trains (models/tasks.py): the loader's, else the kind's."""
        if self.task_name:
            return self.task_name
        if self.kind == "sequences":
            return "sequence-classification"
        return "next-token" if self.kind in ("text", "tokens") else "classification"

    @property
    def accuracy_kind(self) -> str:
        """What one unit of accuracy counts: a character, a token or a sample."""
        return {"text": "character", "tokens": "token"}.get(self.kind, "sample")

    def to(self, torch_device: str) -> "Splits":
        """The splits on `torch_device` (on a GPU, so batches need no host copy)."""
        if torch_device == "cpu":
            return self
        tensors = ("x_train", "y_train", "x_test", "y_test")
        return dataclasses.replace(self, **{k: getattr(self, k).to(torch_device) for k in tensors})
