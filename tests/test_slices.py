"""A slice of a dataset's training split (data/slices.py): class-balanced, drawn and
split by its own seed, never touching the test split; too small is one line naming the
smallest slice that would do; cache keys of specs without a slice are unchanged."""

import pytest
import torch

from undercap.data.spec import DataSpec, load_splits
from undercap.errors import DataError


def _rows(x: torch.Tensor) -> set:
    return {tuple(r.flatten().tolist()) for r in x}


def test_a_slice_is_class_balanced_and_comes_from_the_training_split_only() -> None:
    full = load_splits(DataSpec("digits"))
    part = load_splits(DataSpec("digits", slice_fraction=0.1, slice_seed=0))
    assert part.n_train + part.n_test == pytest.approx(0.1 * full.n_train, abs=10)
    assert part.y_train.bincount().min() >= 8 and part.y_test.bincount().min() >= 2
    assert part.n_test == pytest.approx(0.2 * (part.n_train + part.n_test), abs=10)
    seen = _rows(part.x_train) | _rows(part.x_test)
    assert not seen & _rows(full.x_test)  # the target's test split never informs it
    assert seen <= _rows(full.x_train)
    assert not _rows(part.x_train) & _rows(part.x_test)


def test_the_slice_seed_draws_another_slice_and_the_same_seed_the_same() -> None:
    a = load_splits(DataSpec("digits", slice_fraction=0.1, slice_seed=0))
    b = load_splits(DataSpec("digits", slice_fraction=0.1, slice_seed=1))
    again = load_splits(DataSpec("digits", slice_fraction=0.1, slice_seed=0))
    assert torch.equal(a.x_train, again.x_train) and torch.equal(a.y_test, again.y_test)
    assert _rows(a.x_train) != _rows(b.x_train)


def test_text_slices_are_windows_of_the_training_split() -> None:
    from undercap.data.base import Splits
    from undercap.data.slices import slice_of

    text = Splits(
        name="t", kind="text", x_train=torch.arange(400).reshape(100, 4),
        y_train=torch.arange(400).reshape(100, 4), x_test=torch.zeros(5, 4, dtype=torch.long),
        y_test=torch.zeros(5, 4, dtype=torch.long), num_classes=400,
    )  # fmt: skip
    part = slice_of(text, 0.25, seed=3)
    assert (part.n_train, part.n_test) == (20, 5)
    assert _rows(part.x_test) <= _rows(text.x_train)


def test_too_small_a_slice_names_the_smallest_that_would_do() -> None:
    with pytest.raises(DataError, match=r"the smallest that has them is 2%"):
        load_splits(DataSpec("digits", slice_fraction=0.005))
    with pytest.raises(DataError, match=r"fraction in \(0, 1\]"):
        load_splits(DataSpec("digits", slice_fraction=1.5))


def test_specs_without_a_slice_keep_their_cache_keys() -> None:
    key = DataSpec("digits").key()
    assert "slice_fraction" not in key and "slice_seed" not in key
    sliced = DataSpec("digits", slice_fraction=0.1, slice_seed=2)
    assert sliced.key()["slice_fraction"] == 0.1 and sliced.key()["slice_seed"] == 2
    assert sliced.label == "digits [10% slice, slice seed 2]"
