"""A slice of a dataset's own training split, for estimating r(b) from the target itself.

Many users can copy a few percent of their data to a server even when training must
happen on the device. A slice is drawn from the training split only, class by class for
classification (at random otherwise), then split 80/20 into its own training and
held-out parts: the test split the device run is scored on never informs the estimate.
"""

import dataclasses
import math
from typing import Tuple

import numpy as np
import torch

from undercap.data.base import Splits
from undercap.errors import DataError

#: the slice's own held-out share (the paper's 80/20 image split)
HELD_OUT = 0.2
#: every class needs one training and one held-out sample in a slice
MIN_PER_CLASS = 2


def pct(fraction: float) -> str:
    """0.1 -> "10%", 0.005 -> "0.5%"."""
    return f"{100 * fraction:.3g}%"


def slice_of(splits: Splits, fraction: float, seed: int) -> Splits:
    """`fraction` of `splits`' training split as a dataset of its own (module docstring)."""
    if not 0 < fraction <= 1:
        raise DataError(f"a slice is a fraction in (0, 1] of the training split, got {fraction}")
    rng = np.random.default_rng([seed, 7919])  # the slice's own stream, apart from `seed`'s split
    if splits.task == "classification":
        train, held = _by_class(splits, fraction, rng)
    else:
        train, held = _at_random(splits.n_train, fraction, rng, splits.name)
    tr, te = torch.from_numpy(train), torch.from_numpy(held)
    return dataclasses.replace(
        splits,
        name=f"{splits.name} [{pct(fraction)} slice]",
        x_train=splits.x_train[tr],
        y_train=splits.y_train[tr],
        x_test=splits.x_train[te],
        y_test=splits.y_train[te],
    )


def _by_class(
    splits: Splits, fraction: float, rng: np.random.Generator
) -> Tuple[np.ndarray, np.ndarray]:
    y = splits.y_train.cpu().numpy()
    classes, counts = np.unique(y, return_counts=True)
    taken = [max(int(round(fraction * n)), 0) for n in counts]
    if min(taken) < MIN_PER_CLASS:
        need = math.ceil(100 * MIN_PER_CLASS / min(counts)) / 100
        c = int(classes[int(np.argmin(taken))])
        raise DataError(
            f"a {pct(fraction)} slice of {splits.name} holds {min(taken)} sample(s) of class {c}; "
            f"a slice needs {MIN_PER_CLASS} of every class (one to train, one held out): "
            f"the smallest that has them is {pct(need)}"
        )
    train, held = [], []
    for c, k in zip(classes, taken):
        idx = rng.permutation(np.flatnonzero(y == c))[:k]
        n_held = min(max(int(round(HELD_OUT * k)), 1), k - 1)
        held.append(idx[:n_held])
        train.append(idx[n_held:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held))


def _at_random(
    n: int, fraction: float, rng: np.random.Generator, name: str
) -> Tuple[np.ndarray, np.ndarray]:
    k = int(round(fraction * n))
    if k < MIN_PER_CLASS:
        need = math.ceil(100 * MIN_PER_CLASS / n) / 100
        raise DataError(
            f"a {pct(fraction)} slice of {name} holds {k} item(s); the smallest slice with one "
            f"to train and one held out is {pct(need)}"
        )
    idx = rng.permutation(n)[:k]
    n_held = min(max(int(round(HELD_OUT * k)), 1), k - 1)
    return np.sort(idx[n_held:]), np.sort(idx[:n_held])
