"""Readers for image datasets in the formats they are distributed in.

Each reader returns `RawImages`: numpy arrays as stored (uint8, any layout that
transforms.to_nchw understands) plus the official test split when the format has one.
Every missing or malformed file raises DataError naming the file and what was expected.

Formats:
* .npz: keys x/y (also images/labels, X/Y, data/labels, x_train/y_train[/x_test/y_test]).
* CIFAR-10/100 "python version" pickles (Krizhevsky, https://www.cs.toronto.edu/~kriz/cifar.html):
  dicts with b"data" (N, 3072) uint8 rows in CHW order and b"labels" / b"fine_labels",
  unpickled with an allow-list of numpy reconstructors only (a crafted file runs no code).
* SVHN cropped digits (http://ufldl.stanford.edu/housenumbers/): train_32x32.mat /
  test_32x32.mat, X (32, 32, 3, N), y (N, 1) with label 10 meaning digit 0.
* MNIST / Fashion-MNIST idx files (http://yann.lecun.com/exdb/mnist/), optionally
  gzipped: magic = 0x0000, type byte (0x08 = uint8), number of dims, then each dim
  as a big-endian int32, then the data.
* Image folders: see data/folder.py.
"""

import gzip
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from undercap.errors import DataError, require


@dataclass(frozen=True)
class RawImages:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: Optional[np.ndarray]  # official test split, when the format has one
    y_test: Optional[np.ndarray]
    num_classes: int


def _labels(y: np.ndarray, where: str) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if y.size and (not np.issubdtype(y.dtype, np.integer) and not np.all(np.mod(y, 1) == 0)):
        raise DataError(f"{where}: labels must be integer class indices, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise DataError(f"{where}: labels must be class indices >= 0, found {y.min()}")
    return y


def _check_pair(x: np.ndarray, y: np.ndarray, where: str) -> None:
    if x.shape[0] != y.shape[0]:
        raise DataError(f"{where}: {x.shape[0]} images but {y.shape[0]} labels")
    if x.shape[0] == 0:
        raise DataError(f"{where}: the file holds no images")


# --- .npz --------------------------------------------------------------------------
_NPZ_KEYS = (
    ("x", "y"),
    ("images", "labels"),
    ("X", "Y"),
    ("data", "labels"),
    ("x_train", "y_train"),
    ("X_train", "y_train"),
    ("train_images", "train_labels"),
)
_NPZ_TEST_KEYS = (("x_test", "y_test"), ("X_test", "y_test"), ("test_images", "test_labels"))


def read_npz(path: Path) -> RawImages:
    if not path.is_file():
        raise DataError(f"npz: {path} not found; expected a .npz file with arrays x and y")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # zipfile/ValueError/OSError for anything that is not an npz
        raise DataError(f"npz: {path} is not a readable .npz archive ({type(e).__name__})") from e
    pair = next(((a, b) for a, b in _NPZ_KEYS if a in arrays and b in arrays), None)
    if pair is None:
        raise DataError(
            f"npz: {path} has arrays {sorted(arrays)}; expected images and labels under "
            "x/y (or images/labels, x_train/y_train)"
        )
    x, y = arrays[pair[0]], _labels(arrays[pair[1]], str(path))
    _check_pair(x, y, str(path))
    test = next(((a, b) for a, b in _NPZ_TEST_KEYS if a in arrays and b in arrays), None)
    xt = yt = None
    if test is not None:
        xt, yt = arrays[test[0]], _labels(arrays[test[1]], str(path))
        _check_pair(xt, yt, str(path))
    n_cls = int(max(y.max(), yt.max() if yt is not None else 0)) + 1
    return RawImages(x, y, xt, yt, n_cls)


# --- CIFAR pickles -----------------------------------------------------------------
class _NumpyOnlyUnpickler(pickle.Unpickler):
    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # Python 2 pickles of byte strings
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


#: (folder, training files, test files, label key, classes)
_CIFAR = {
    "cifar10": (
        "cifar-10-batches-py",
        [f"data_batch_{i}" for i in range(1, 6)],
        ["test_batch"],
        b"labels",
        10,
    ),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels", 100),
}


def _cifar_file(
    path: Path, label_key: bytes, name: str, expected: str
) -> Tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        raise DataError(
            f"{name}: {path} not found; expected the {expected} extracted under --data-dir"
        )
    try:
        with path.open("rb") as f:
            d = _NumpyOnlyUnpickler(f, encoding="bytes").load()
        data, labels = np.asarray(d[b"data"]), np.asarray(d[label_key])
    except Exception as e:
        raise DataError(
            f"{name}: {path} is not a {expected} batch (a pickled dict with b'data' and "
            f"{label_key!r}): {type(e).__name__}"
        ) from e
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise DataError(
            f"{name}: {path}: data has shape {data.shape} {data.dtype}; expected (N, 3072) uint8"
        )
    y = _labels(labels, str(path))
    _check_pair(data, y, str(path))
    return data.reshape(-1, 3, 32, 32), y


def read_cifar(root: Path, name: str) -> RawImages:
    sub, train_files, test_files, key, n_cls = _CIFAR[name]
    expected = f"CIFAR-{n_cls} python version (cifar-{n_cls}-python.tar.gz)"
    folder = root / sub if (root / sub).is_dir() else root
    parts = [_cifar_file(folder / f, key, name, expected) for f in train_files + test_files]
    n_tr = len(train_files)
    x, y = (np.concatenate(arrays) for arrays in zip(*parts[:n_tr]))
    xt, yt = (np.concatenate(arrays) for arrays in zip(*parts[n_tr:]))
    return RawImages(x, y, xt, yt, n_cls)


# --- SVHN .mat ---------------------------------------------------------------------
def _svhn_file(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    scipy_io = require("scipy.io", "mat", "reading SVHN's .mat files")

    if not path.is_file():
        raise DataError(
            f"svhn: {path} not found; expected SVHN's cropped-digit files train_32x32.mat and "
            "test_32x32.mat under --data-dir"
        )
    try:
        m = scipy_io.loadmat(str(path))
        x, y = np.asarray(m["X"]), np.asarray(m["y"])
    except Exception as e:  # MatReadError, KeyError, NotImplementedError (v7.3 HDF5)
        raise DataError(
            f"svhn: {path} is not an SVHN .mat file with X and y ({type(e).__name__})"
        ) from e
    if x.ndim != 4 or x.shape[2] != 3:
        raise DataError(f"svhn: {path}: X has shape {x.shape}; expected (32, 32, 3, N)")
    y = _labels(y, str(path))
    y[y == 10] = 0  # SVHN stores digit 0 as label 10
    x = x.transpose(3, 2, 0, 1)  # (H, W, C, N) -> (N, C, H, W)
    _check_pair(x, y, str(path))
    return x, y


def read_svhn(root: Path) -> RawImages:
    folder = root / "svhn" if (root / "svhn").is_dir() else root
    x, y = _svhn_file(folder / "train_32x32.mat")
    xt, yt = _svhn_file(folder / "test_32x32.mat")
    return RawImages(x, y, xt, yt, 10)


# --- MNIST / Fashion-MNIST idx -----------------------------------------------------
_TORCHVISION_DIRS = {"mnist": "MNIST/raw", "fashion-mnist": "FashionMNIST/raw"}


def parse_idx(data: bytes, where: str) -> np.ndarray:
    """Parse an idx file: 2 zero bytes, type code, dim count, big-endian int32 dims."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataError(f"{where}: not an idx file (bad magic number)")
    if data[2] != 0x08:
        raise DataError(f"{where}: idx type code 0x{data[2]:02x}; expected 0x08 (unsigned byte)")
    ndim = data[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(data) < header:
        raise DataError(f"{where}: truncated idx header")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
    if len(data) - header != int(np.prod(dims)):
        raise DataError(
            f"{where}: idx header says {dims} but the file holds {len(data) - header} bytes"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _find_idx(root: Path, name: str, stem: str) -> Path:
    dirs = [root, root / name, root / _TORCHVISION_DIRS[name]]
    variants = [stem, stem.replace("-idx", ".idx")]  # Kaggle copies use "train-images.idx3-ubyte"
    for d in dirs:
        for v in variants:
            for suffix in ("", ".gz"):
                if (d / (v + suffix)).is_file():
                    return d / (v + suffix)
    raise DataError(
        f"{name}: {root / stem}[.gz] not found; expected the four idx files (train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, gzipped or not) "
        "under --data-dir"
    )


def _read_idx(path: Path) -> np.ndarray:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: cannot read ({type(e).__name__}: {e})") from e
    return parse_idx(raw, str(path))


def read_idx_dataset(root: Path, name: str) -> RawImages:
    kinds = ("images-idx3-ubyte", "labels-idx1-ubyte")
    stems = [f"{split}-{kind}" for split in ("train", "t10k") for kind in kinds]
    x, y, xt, yt = [_read_idx(_find_idx(root, name, stem)) for stem in stems]
    for imgs, labels in ((x, y), (xt, yt)):
        if imgs.ndim != 3 or labels.ndim != 1:
            raise DataError(
                f"{name}: idx images must be (N, H, W) and labels (N,), got {imgs.shape}, {labels.shape}"
            )
        _check_pair(imgs, labels, f"{name} idx files in {root}")
    return RawImages(x, y.astype(np.int64), xt, yt.astype(np.int64), 10)
