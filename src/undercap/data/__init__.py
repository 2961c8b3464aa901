"""Datasets in the formats users have on disk, plus a bundled zero-download default.

`load_dataset(spec, data_dir=..., input_shape=...)` returns a `Splits` (data/base.py).

Specs (relative paths are resolved under `data_dir`, default the current directory):
    digits              scikit-learn's bundled 8x8 digits (1797 images, 10 classes)
    npz:FILE            arrays x/y (or images/labels, x_train/y_train[+x_test/y_test])
    cifar10, cifar100   the "python version" pickles (cifar-10-batches-py/, cifar-100-python/)
    svhn                train_32x32.mat, test_32x32.mat
    mnist, fashion-mnist  idx files, gzipped or not
    folder:DIR          DIR/<class>/<images> (or DIR/train/..., DIR/test/...)
    text:FILE[+FILE...] UTF-8 text for the character transformer
    py:package.module:factory, py:path/to/file.py:factory
                        your own (train, test) torch datasets (data/user.py)
The four named formats also take an explicit folder: "cifar10:/data/cifar".

Splits (`split=`): "paper", the paper's seeded splits, 80/20 per class for images (of
the training part where the format has an official split, whose test set is never
touched) and 90/10 of the windows for text; "official", the format's own (cifar10/100,
svhn, mnist, fashion-mnist; npz with x_test/y_test; folder with train/ and test/);
None: "official" where the format has one, else "paper".

Images: float32 (N, C, H, W), mapped to `input_shape` (C, H, W) if given and normalised
per channel with train statistics (data/transforms.py). `limit` keeps a deterministic
class-balanced subset of at most `limit` training and limit // 4 test samples (text:
limit and limit // 9 windows), for fast runs.
"""

import functools
from pathlib import Path
from typing import List, Optional, Tuple, Union

import numpy as np
import torch

from undercap.data import images as _img
from undercap.data import text as _text
from undercap.data import transforms as _tf
from undercap.data.base import Splits
from undercap.data.folder import read_folder
from undercap.data.user import load_user_data
from undercap.errors import DataError, UndercapError, require
from undercap.models.user import split as _split_import_path

__all__ = ["DATASET_KINDS", "Splits", "load_dataset", "parse_spec"]

DATASET_KINDS = (
    "digits",
    "npz",
    "cifar10",
    "cifar100",
    "svhn",
    "mnist",
    "fashion-mnist",
    "folder",
    "text",
    "py",
)
_NEEDS_ARG = {"npz", "folder", "text", "py"}


def parse_spec(spec: str) -> Tuple[str, Optional[str]]:
    """ "kind[:arg]" -> (kind, arg); checks the kind and that npz/folder/text/py have an
    arg (for py: an import path)."""
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "py":
        try:
            _split_import_path(arg, "dataset")
        except UndercapError as e:
            raise DataError(f"{e} (py:package.module:factory or py:path/file.py:factory)") from e
        return "py", arg
    if kind not in DATASET_KINDS:
        raise DataError(
            f"unknown dataset {spec!r}; use one of {', '.join(DATASET_KINDS)} "
            "(npz:FILE, folder:DIR, text:FILE[+FILE], py:module:factory)"
        )
    if kind in _NEEDS_ARG and not arg:
        raise DataError(f"dataset {kind!r} needs a path: {kind}:PATH")
    if kind == "digits" and arg:
        raise DataError("dataset 'digits' takes no path")
    return kind, arg or None


def _resolve(arg: Optional[str], data_dir: Optional[Union[str, Path]]) -> Path:
    base = Path(data_dir) if data_dir is not None else Path(".")
    if arg is None:
        return base
    p = Path(arg).expanduser()
    return p if p.is_absolute() else base / p


@functools.lru_cache(maxsize=None)
def check_numpy_bridge() -> None:
    """Every dataset reaches torch through numpy. torch wheels built against numpy 1.x
    (before torch 2.3, so NVIDIA's JetPack 5/6 wheels 2.0/2.1) cannot exchange arrays
    with numpy 2: `torch.from_numpy` raises "Numpy is not available" deep inside
    loading. pip cannot know this (torch declares no numpy requirement), so check once,
    up front, and name the fix."""
    try:
        torch.from_numpy(np.zeros(1))
    except (RuntimeError, TypeError) as e:
        raise UndercapError(
            f"torch {torch.__version__} cannot use the installed numpy {np.__version__} "
            f"({e}); torch builds before 2.3 need numpy 1.x: pip install 'numpy<2'"
        ) from e


def load_dataset(
    spec: str,
    *,
    data_dir: Optional[Union[str, Path]] = None,
    input_shape: Optional[Tuple[int, ...]] = None,
    context: int = 64,
    seed: int = 0,
    limit: Optional[int] = None,
    split: Optional[str] = None,
    task: Optional[str] = None,
) -> Splits:
    """Load a dataset by spec (module docstring) as train/test tensors; `task` names a
    `py:` dataset's task where its items cannot say it (data/user.py)."""
    check_numpy_bridge()
    kind, arg = parse_spec(spec)
    if kind == "py":
        return load_user_data(spec, input_shape=input_shape, seed=seed, limit=limit, task=task)
    if split not in (None, "paper", "official"):
        raise DataError(f"unknown split {split!r}; use 'paper' or 'official'")
    if limit is not None and limit < 1:
        raise DataError(f"limit must be a positive number of samples, got {limit}")
    if kind == "text":
        if input_shape is not None:
            if len(tuple(input_shape)) != 1:
                raise DataError(f"text input shape is (context,), got {tuple(input_shape)}")
            context = int(tuple(input_shape)[0])
        paths = [_resolve(a, data_dir) for a in arg.split("+")]  # type: ignore[union-attr]
        return _load_text(spec, paths, context, seed, limit, split)
    shape = tuple(int(s) for s in input_shape) if input_shape is not None else None
    raw = _read_images(kind, _resolve(arg, data_dir), shape)
    return _image_splits(spec, raw, shape, seed, limit, split)


def _read_images(kind: str, path: Path, shape: Optional[Tuple[int, ...]]) -> _img.RawImages:
    if kind == "digits":
        load_digits = require("sklearn.datasets", "digits", "the bundled digits").load_digits
        d = load_digits()  # pixel values 0..16; normalisation makes the scale irrelevant
        return _img.RawImages(
            d.images.astype(np.float32), d.target.astype(np.int64), None, None, 10
        )
    if kind == "npz":
        return _img.read_npz(path)
    if kind in ("cifar10", "cifar100"):
        return _img.read_cifar(path, kind)
    if kind == "svhn":
        return _img.read_svhn(path)
    if kind in ("mnist", "fashion-mnist"):
        return _img.read_idx_dataset(path, kind)
    size_hw = (shape[1], shape[2]) if shape is not None and len(shape) == 3 else None
    return read_folder(path, size_hw)


def _image_splits(
    spec: str,
    raw: _img.RawImages,
    shape: Optional[Tuple[int, ...]],
    seed: int,
    limit: Optional[int],
    split: Optional[str],
) -> Splits:
    has_official = raw.x_test is not None
    if split == "official" and not has_official:
        raise DataError(f"{spec} has no official test split; use split='paper' (80/20)")
    x, y = raw.x_train, raw.y_train
    if has_official and split != "paper":
        xt_src, yt_src = raw.x_test, raw.y_test
        tr, te = np.arange(y.size), np.arange(yt_src.size)
    else:
        xt_src, yt_src = x, y
        tr, te = _tf.stratified_split(y, 0.8, seed)
    if limit is not None:
        tr = tr[_tf.balanced_subset(y[tr], limit, seed)]
        te = te[_tf.balanced_subset(yt_src[te], max(limit // 4, 1), seed + 1)]  # type: ignore[index]
    x_train = _tf.map_shape(_tf.to_float(_tf.to_nchw(x[tr], spec)), shape)
    x_test = _tf.map_shape(_tf.to_float(_tf.to_nchw(xt_src[te], spec)), shape)  # type: ignore[index]
    x_train, x_test = _tf.normalise(x_train, x_test, shape[0] if shape else None)
    y_train = torch.from_numpy(y[tr].astype(np.int64))
    y_test = torch.from_numpy(yt_src[te].astype(np.int64))  # type: ignore[index]
    return Splits(
        name=spec,
        kind="image",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=raw.num_classes,
    )


def _load_text(
    spec: str,
    paths: List[Path],
    context: int,
    seed: int,
    limit: Optional[int],
    split: Optional[str],
) -> Splits:
    if split == "official":
        raise DataError(f"{spec}: plain text has no official split; use split='paper' (90/10)")
    if context < 1:
        raise DataError(f"text context must be >= 1 characters, got {context}")
    ids = _text.encode(_text.read_corpus(paths))
    if (ids.size - 1) // context < 2:
        raise DataError(
            f"{spec}: corpus has {ids.size} characters; need at least "
            f"{2 * context + 1} for one training and one test window of {context}"
        )
    x, y = _text.windows(ids, context)
    tr, te = _text.split_windows(x.shape[0], seed, limit=limit)
    tr_t, te_t = torch.from_numpy(tr), torch.from_numpy(te)
    return Splits(
        name=spec,
        kind="text",
        x_train=x[tr_t],
        y_train=y[tr_t],
        x_test=x[te_t],
        y_test=y[te_t],
        num_classes=_text.VOCAB_SIZE,
        vocab=_text.VOCAB,
    )
