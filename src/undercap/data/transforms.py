"""Array layout, channel/size mapping, normalisation, subsets and splits for images.

All functions are deterministic given their seed. Images end as float32 NCHW tensors
normalised to mean 0 / std 1 per channel with the TRAIN split's statistics (the test
split is normalised with the same numbers, so no test information leaks).
"""

from inspect import signature
from typing import Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from undercap.errors import DataError

# ITU-R BT.601 luma weights, for mapping colour images to a 1-channel model.
_LUMA = (0.299, 0.587, 0.114)
_CHUNK = 4096  # images resized per interpolate call (bounds temporary memory)


def to_nchw(x: np.ndarray, where: str) -> np.ndarray:
    """(N,H,W) grayscale, (N,H,W,C) or (N,C,H,W) with C in 1/3/4 -> (N,C,H,W), alpha dropped.
    Ambiguous 4-d shapes (both axis 1 and axis 3 look like channels) are read as NHWC,
    the layout numpy/PIL images use."""
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[3] in (1, 3, 4):
        x = x.transpose(0, 3, 1, 2)
    elif x.ndim == 4 and x.shape[1] not in (1, 3, 4):
        raise DataError(
            f"{where}: image array shape {x.shape} has no channel axis of size 1, 3 or 4; "
            "expected (N,H,W), (N,H,W,C) or (N,C,H,W)"
        )
    elif x.ndim != 4:
        raise DataError(
            f"{where}: image array has {x.ndim} dimensions {x.shape}; "
            "expected (N,H,W), (N,H,W,C) or (N,C,H,W)"
        )
    if x.shape[1] == 4:
        x = x[:, :3]
    return np.ascontiguousarray(x)


def to_float(x: np.ndarray) -> torch.Tensor:
    """uint8 pixels -> [0, 1]; other dtypes are taken as they are (normalisation
    follows, so their scale does not matter)."""
    t = torch.from_numpy(np.asarray(x))
    return t.float().div_(255.0) if t.dtype == torch.uint8 else t.float()


def map_shape(x: torch.Tensor, shape: Optional[Tuple[int, ...]]) -> torch.Tensor:
    """Map (N,C,H,W) images to the model's (C',H',W'): bilinear resize (antialiased
    when shrinking), colour -> gray by BT.601 luma. Gray -> colour replication is
    left to `normalise`, which does it as a zero-copy expand."""
    if shape is None:
        return x
    if len(shape) != 3:
        raise DataError(f"image input shape must be (channels, height, width), got {shape}")
    c, h, w = shape
    if c == 1 and x.shape[1] == 3:
        weights = torch.tensor(_LUMA, dtype=x.dtype).view(1, 3, 1, 1)
        x = (x * weights).sum(dim=1, keepdim=True)
    elif x.shape[1] != c and not (x.shape[1] == 1 and c == 3):
        raise DataError(f"cannot map {x.shape[1]}-channel images to {c} channels")
    if tuple(x.shape[2:]) != (h, w):
        shrink = h < x.shape[2] or w < x.shape[3]
        # antialias= arrived in torch 1.11: JetPack 4.6's torch 1.10 shrinks without it
        aa = {"antialias": shrink} if "antialias" in signature(F.interpolate).parameters else {}
        parts = [
            F.interpolate(
                x[i : i + _CHUNK], size=(h, w), mode="bilinear", align_corners=False, **aa
            )
            for i in range(0, x.shape[0], _CHUNK)
        ]
        x = torch.cat(parts) if parts else x.new_zeros((0, x.shape[1], h, w))
    return x


def normalise(
    train: torch.Tensor, test: torch.Tensor, channels: Optional[int]
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean 0 / std 1 per channel from train statistics (in place: pass fresh
    tensors); then replicate a single channel to `channels` with expand (a view: a
    3x32x32 MNIST costs 1x the memory)."""
    dims = (0, 2, 3)
    mean = train.mean(dim=dims, keepdim=True)
    std = train.std(dim=dims, keepdim=True).clamp_min(1e-6)
    # in place: callers pass fresh tensors, and this halves peak memory on 4 GB devices
    train, test = train.sub_(mean).div_(std), test.sub_(mean).div_(std)
    if channels is not None and channels != train.shape[1]:
        train, test = train.expand(-1, channels, -1, -1), test.expand(-1, channels, -1, -1)
    return train, test


def stratified_split(y: np.ndarray, train_frac: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Deterministic per-class split: each class's samples are shuffled by `seed` and
    the first round(train_frac * n_class) go to train (paper: 80/20 for images)."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(train_frac * idx.size))
        train.append(idx[:k])
        test.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def balanced_subset(y: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Deterministic class-balanced subset of size min(n, len(y)): classes take turns
    (round robin over each class's seeded shuffle), so every class gets n // classes
    samples when it has them."""
    if n >= y.size:
        return np.arange(y.size)
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(y == c)) for c in np.unique(y)]
    order = []
    for rank in range(max(len(p) for p in per_class)):
        order.extend(p[rank] for p in per_class if rank < len(p))
        if len(order) >= n:
            break
    return np.sort(np.asarray(order[:n], dtype=np.int64))
