"""Which data to load (`DataSpec`), and loading it as shuffled train/test tensors."""

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from undercap.data import load_dataset
from undercap.data.base import Splits
from undercap.data.slices import pct, slice_of


@dataclass(frozen=True)
class DataSpec:
    """A dataset and how to load it; hashable and JSON-able (cache keys).

    Args:
        dataset: What `--dataset` takes: `digits`, `npz:FILE`, `cifar10`, `cifar100`,
            `svhn`, `mnist`, `fashion-mnist`, `folder:DIR`, `text:FILE[+FILE...]`, or
            your own `py:path/to/file.py:factory` returning `(train, test)` datasets.
        data_dir: Folder that relative dataset files are under.
        input_shape: Map images to this shape, e.g. `(3, 32, 32)`; None: the data's own.
        context: Characters per sequence (text datasets).
        limit: Use a class-balanced subset of at most this many training samples.
        seed: Seed of the train/test split and subset, fixed so that every run sees
            the same test set.
        split: `"paper"` (seeded 80/20, text 90/10) or `"official"` (the format's own);
            None: official where the format has one.
        task: Your own model's task where it cannot be inferred (`"classification"`,
            `"next-token"`, `"sequence-classification"`, `"token-classification"`,
            `"masked-lm"`, `"seq2seq"`); None: what the data and model say.
        slice_fraction: Use only this fraction of the training split (after `limit`),
            class-balanced for classification, itself split 80/20 into training and
            held-out parts: r(b) from a slice of the target's own data, which never
            reads the dataset's test split. None: the whole dataset.
        slice_seed: Which slice (the draw and its 80/20 split).
    """

    dataset: str
    data_dir: Optional[str] = None
    input_shape: Optional[Tuple[int, ...]] = None
    context: int = 64
    limit: Optional[int] = None
    seed: int = 0
    split: Optional[str] = None
    task: Optional[str] = None
    slice_fraction: Optional[float] = None
    slice_seed: int = 0

    @property
    def label(self) -> str:
        """A readable name: the spec plus any subset/split/shape."""
        extra = []
        if self.slice_fraction is not None:
            extra.append(f"{pct(self.slice_fraction)} slice, slice seed {self.slice_seed}")
        if self.limit is not None:
            extra.append(f"{self.limit}-sample subset")
        if self.seed:
            extra.append(f"split seed {self.seed}")
        if self.input_shape:
            extra.append("as " + "x".join(str(x) for x in self.input_shape))
        return self.dataset + (f" [{', '.join(extra)}]" if extra else "")

    def key(self) -> Dict[str, Any]:
        """What determines the loaded tensors (for cache keys)."""
        d = dataclasses.asdict(self)
        d["input_shape"] = None if self.input_shape is None else list(self.input_shape)
        for name in ("task", "slice_fraction"):  # keys cached before these stay valid
            if d[name] is None:
                del d[name]
        if self.slice_fraction is None:
            del d["slice_seed"]
        return d


def load_splits(spec: DataSpec, torch_device: str = "cpu") -> Splits:
    """Load the splits, test split in a seeded random order; on a GPU keep them there
    so batches need no host copy.

    Why the shuffle: a file stored class by class (like the shared CIFAR quarters)
    yields a class-sorted test split, and evaluating on at most N test samples
    (LoopConfig.eval_max_samples) takes the first N: that would score 4 of 10
    classes and swing with the model's class bias. Shuffled, any prefix is a random
    subset; full-split accuracy is unchanged. Training order is the Trainer's own."""
    splits = load_dataset(
        spec.dataset,
        data_dir=spec.data_dir,
        input_shape=spec.input_shape,
        context=spec.context,
        seed=spec.seed,
        limit=spec.limit,
        split=spec.split,
        task=spec.task,
    )
    if spec.slice_fraction is not None:
        splits = slice_of(splits, spec.slice_fraction, spec.slice_seed)
    order = torch.randperm(splits.n_test, generator=torch.Generator().manual_seed(spec.seed))
    shuffled = dataclasses.replace(splits, x_test=splits.x_test[order], y_test=splits.y_test[order])
    return shuffled.to(torch_device)


def describe_slice(spec: DataSpec) -> Dict[str, Any]:
    """Which slice a spec with `slice_fraction` is, for the artifacts that use it;
    loading it first makes a slice too small for its classes fail before any run."""
    n_train, n_held_out = _slice_sizes(spec)
    return {
        "of": spec.dataset,
        "fraction": spec.slice_fraction,
        "percent": pct(float(spec.slice_fraction)),  # type: ignore[arg-type]
        "seed": spec.slice_seed,
        "split_seed": spec.seed,  # the dataset's own split: the slice is of its training part
        "limit": spec.limit,
        "train_items": n_train,
        "held_out_items": n_held_out,
    }


@functools.lru_cache(maxsize=8)
def _slice_sizes(spec: DataSpec) -> Tuple[int, int]:
    """Loaded once a process: `run` checks its slices before profiling and describes
    them again for the estimate's artifact."""
    s = load_splits(spec)
    return int(s.n_train), int(s.n_test)
