"""Data undercap has never seen, from your own torch Datasets.

Use it with `--proxy py:examples/my_data.py:load_proxy` and
`--target py:examples/my_data.py:load_target`. Each function returns
`(train, test)`: two map-style datasets of `(input, label)` pairs; undercap reads the
input shape and the class count from them.

The images are scikit-learn's 8x8 handwritten digits (UCI "Optical Recognition of
Handwritten Digits", 1797 images; pip install scikit-learn), served as 1x16x16
tensors by a Dataset class of our own: upsampled 2x, standardised, and, for
training, shifted by up to one pixel (a common augmentation). The proxy is a small
seeded quarter of the training split, like the paper's CIFAR-10 quarter; the target
is the whole training split, so the pair tests whether r(b) from a cheap subset
predicts r(b) on the full data.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
from torch.utils.data import Dataset


class Digits16(Dataset):
    """8x8 digits as 1x16x16 float tensors; `shift` pixels of random translation."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, shift: int = 0, seed: int = 0):
        # pixels are 0..16; standardised with the digits' overall mean and spread
        x = torch.from_numpy((images.astype(np.float32) - 4.9) / 6.0)[:, None]  # (N, 1, 8, 8)
        self.x = torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")
        self.y = torch.from_numpy(labels.astype(np.int64))
        self.shift = shift
        self.gen = torch.Generator().manual_seed(seed)
        self.classes = [str(d) for d in range(10)]

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        if self.shift:
            dx, dy = torch.randint(-self.shift, self.shift + 1, (2,), generator=self.gen)
            x = torch.roll(x, shifts=(int(dy), int(dx)), dims=(1, 2))
        return x, self.y[i]


def _split(seed: int = 0) -> Tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits

    d = load_digits()
    order = np.random.default_rng(seed).permutation(len(d.target))
    cut = int(0.8 * len(order))
    tr, te = order[:cut], order[cut:]
    return d.images[tr], d.target[tr], d.images[te], d.target[te]


def load_target() -> Tuple[Dataset, Dataset]:
    x, y, xt, yt = _split()
    return Digits16(x, y, shift=1), Digits16(xt, yt)


def load_proxy() -> Tuple[Dataset, Dataset]:
    x, y, xt, yt = _split()
    quarter = np.random.default_rng(1).permutation(len(y))[: len(y) // 4]
    return Digits16(x[quarter], y[quarter], shift=1, seed=1), Digits16(xt, yt)
