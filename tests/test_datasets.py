"""Datasets: every on-disk format written tiny in tmp_path, splits, mapping, errors."""

import gzip
import pickle
import struct
from typing import Set, Tuple

import numpy as np
import pytest
import torch

from undercap.data import load_dataset, parse_spec
from undercap.data.text import UNK_ID, VOCAB, VOCAB_SIZE, encode
from undercap.errors import DataError

RNG = np.random.default_rng(0)


def _images(n: int, shape: Tuple[int, ...]) -> np.ndarray:
    return RNG.integers(0, 256, size=(n, *shape), dtype=np.uint8)


def _normalised(x: np.ndarray, train: np.ndarray) -> torch.Tensor:
    """What the loader should produce from NCHW uint8 `x`: /255, train-stat normalised."""
    t, tr = torch.from_numpy(x).float() / 255, torch.from_numpy(train).float() / 255
    mean, std = tr.mean(dim=(0, 2, 3), keepdim=True), tr.std(dim=(0, 2, 3), keepdim=True)
    return (t - mean) / std


def _balanced_labels(n: int, classes: int) -> np.ndarray:
    return np.arange(n) % classes


# --- CIFAR ---------------------------------------------------------------------------
def _write_cifar10(root, per_batch: int = 10) -> Tuple[np.ndarray, np.ndarray]:
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    xs, ys = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x, y = _images(per_batch, (3072,)), _balanced_labels(per_batch, 10)
        with (d / name).open("wb") as f:
            pickle.dump({b"data": x, b"labels": y.tolist(), b"batch_label": b"x"}, f, protocol=2)
        xs.append(x.reshape(-1, 3, 32, 32))
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def test_cifar10_official_split_and_layout(tmp_path) -> None:
    x, y = _write_cifar10(tmp_path)
    s = load_dataset("cifar10", data_dir=tmp_path)
    assert (s.n_train, s.n_test, s.num_classes, s.kind) == (50, 10, 10, "image")
    assert s.input_shape == (3, 32, 32)
    expected = _normalised(x[:50], x[:50])
    assert torch.allclose(s.x_train, expected, atol=1e-5)  # rows are CHW, in batch order
    assert torch.allclose(s.x_test, _normalised(x[50:], x[:50]), atol=1e-5)
    assert s.y_train.tolist() == y[:50].tolist()
    # "cifar10:DIR" form and the paper's 80/20 split of the training part
    p = load_dataset(f"cifar10:{tmp_path}", split="paper")
    assert (p.n_train, p.n_test) == (40, 10)
    assert torch.bincount(p.y_train).tolist() == [4] * 10


def test_cifar100_fine_labels(tmp_path) -> None:
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    for name, n in (("train", 20), ("test", 5)):
        labels = (np.arange(n) * 7) % 100
        with (d / name).open("wb") as f:
            pickle.dump(
                {
                    b"data": _images(n, (3072,)),
                    b"fine_labels": labels.tolist(),
                    b"coarse_labels": [0] * n,
                },
                f,
            )
    s = load_dataset("cifar100", data_dir=tmp_path)
    assert (s.n_train, s.n_test, s.num_classes) == (20, 5, 100)
    assert s.y_train.tolist() == ((np.arange(20) * 7) % 100).tolist()


def test_cifar_errors(tmp_path) -> None:
    with pytest.raises(DataError, match="data_batch_1 not found; expected the CIFAR-10"):
        load_dataset("cifar10", data_dir=tmp_path)
    _write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"garbage")
    with pytest.raises(DataError, match="data_batch_3 is not a CIFAR-10"):
        load_dataset("cifar10", data_dir=tmp_path)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_cifar_pickle_cannot_run_code(tmp_path, capsys) -> None:
    _write_cifar10(tmp_path)
    with (tmp_path / "cifar-10-batches-py" / "test_batch").open("wb") as f:
        pickle.dump({b"data": _Evil(), b"labels": [0]}, f)
    with pytest.raises(DataError, match="test_batch"):
        load_dataset("cifar10", data_dir=tmp_path)
    assert "pwned" not in capsys.readouterr().out


# --- SVHN ----------------------------------------------------------------------------
def test_svhn_mat(tmp_path) -> None:
    import scipy.io

    raw = {}
    for name, n in (("train", 12), ("test", 4)):
        x = _images(n, (32, 32, 3))  # NHWC, stored as HWCN
        y = (np.arange(n) % 10) + 1  # labels 1..10, 10 = digit 0
        scipy.io.savemat(
            tmp_path / f"{name}_32x32.mat", {"X": x.transpose(1, 2, 3, 0), "y": y.reshape(-1, 1)}
        )
        raw[name] = (x, y)
    s = load_dataset("svhn", data_dir=tmp_path)
    assert (s.n_train, s.n_test, s.num_classes) == (12, 4, 10)
    assert s.y_train.tolist() == (raw["train"][1] % 10).tolist()
    x_nchw = raw["train"][0].transpose(0, 3, 1, 2)
    assert torch.allclose(s.x_train, _normalised(x_nchw, x_nchw), atol=1e-5)
    (tmp_path / "test_32x32.mat").write_bytes(b"MATLAB 5.0 nonsense")
    with pytest.raises(DataError, match="test_32x32.mat is not an SVHN"):
        load_dataset("svhn", data_dir=tmp_path)
    with pytest.raises(DataError, match="train_32x32.mat not found"):
        load_dataset("svhn", data_dir=tmp_path / "nowhere")


# --- MNIST idx -----------------------------------------------------------------------
def _idx(arr: np.ndarray) -> bytes:
    return (
        struct.pack(">BBBB", 0, 0, 0x08, arr.ndim)
        + struct.pack(f">{arr.ndim}i", *arr.shape)
        + arr.astype(np.uint8).tobytes()
    )


def _write_idx(folder, gz: bool, n: int = 20, nt: int = 10) -> Tuple[np.ndarray, np.ndarray]:
    folder.mkdir(parents=True, exist_ok=True)
    x, y = _images(n, (28, 28)), _balanced_labels(n, 10)
    xt, yt = _images(nt, (28, 28)), _balanced_labels(nt, 10)
    for stem, arr in (
        ("train-images-idx3-ubyte", x),
        ("train-labels-idx1-ubyte", y),
        ("t10k-images-idx3-ubyte", xt),
        ("t10k-labels-idx1-ubyte", yt),
    ):
        data = _idx(arr)
        (folder / (stem + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)
    return x, y


@pytest.mark.parametrize("gz", [False, True])
def test_idx_files(tmp_path, gz: bool) -> None:
    x, y = _write_idx(tmp_path, gz)
    s = load_dataset("mnist", data_dir=tmp_path)
    assert (s.n_train, s.n_test, s.input_shape) == (20, 10, (1, 28, 28))
    assert torch.allclose(s.x_train, _normalised(x[:, None], x[:, None]), atol=1e-5)
    assert s.y_train.tolist() == y.tolist()


def test_idx_torchvision_layout_and_errors(tmp_path) -> None:
    _write_idx(tmp_path / "FashionMNIST" / "raw", gz=True)
    assert load_dataset("fashion-mnist", data_dir=tmp_path).n_train == 20
    bad = tmp_path / "bad"
    _write_idx(bad, gz=False)
    (bad / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x0a\x01")
    with pytest.raises(DataError, match="header says .10,. but the file holds 1 bytes"):
        load_dataset("mnist", data_dir=bad)
    (bad / "t10k-labels-idx1-ubyte").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(DataError, match="bad magic"):
        load_dataset("mnist", data_dir=bad)
    with pytest.raises(DataError, match="train-images-idx3-ubyte.*not found"):
        load_dataset("mnist", data_dir=tmp_path / "empty")


# --- image folders -------------------------------------------------------------------
def _write_png(path, arr: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def test_folder_of_pngs(tmp_path) -> None:
    for c in ("cat", "dog", "emu"):
        for i in range(5):
            size = (12, 10, 3) if i else (20, 16, 3)  # one odd-sized image gets resized
            _write_png(tmp_path / "imgs" / c / f"{i}.png", _images(1, size)[0])
    s = load_dataset("folder:imgs", data_dir=tmp_path, input_shape=(3, 8, 8))
    assert (s.n_train, s.n_test, s.num_classes, s.input_shape) == (12, 3, 3, (3, 8, 8))
    assert torch.bincount(s.y_train).tolist() == [4, 4, 4]


def test_folder_gray_official_split(tmp_path) -> None:
    for split, n in (("train", 4), ("test", 2)):
        for c in ("a", "b"):
            for i in range(n):
                _write_png(tmp_path / split / c / f"{i}.png", _images(1, (6, 6))[0])
    s = load_dataset(f"folder:{tmp_path}")
    assert (s.n_train, s.n_test, s.input_shape) == (8, 4, (1, 6, 6))
    (tmp_path / "train" / "a" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="broken.png is not a readable image"):
        load_dataset(f"folder:{tmp_path}")
    with pytest.raises(DataError, match="no images under"):
        load_dataset(f"folder:{tmp_path / 'train' / 'b'}")


# --- npz, layouts, mapping, splits ---------------------------------------------------
def _ids_npz(path, n: int = 100, layout: str = "hw", keys=("x", "y")) -> None:
    """Image i is constant i (so sample identity survives normalisation)."""
    shapes = {"hw": (6, 6), "hwc": (6, 6, 3), "nchw": (3, 6, 6)}
    x = np.broadcast_to(
        np.arange(n, dtype=np.uint8).reshape(n, 1, 1, *(1,) * (layout != "hw")),
        (n, *shapes[layout]),
    ).copy()
    np.savez(path, **{keys[0]: x, keys[1]: _balanced_labels(n, 5)})


def _sample_ids(x: torch.Tensor) -> Set[float]:
    return {round(float(v), 4) for v in x[:, 0, 0, 0]}


@pytest.mark.parametrize("layout", ["hw", "hwc", "nchw"])
def test_npz_layouts_and_paper_split(tmp_path, layout: str) -> None:
    _ids_npz(tmp_path / "d.npz", layout=layout)
    s = load_dataset("npz:d.npz", data_dir=tmp_path)
    assert (s.n_train, s.n_test) == (80, 20)
    assert s.input_shape == ((1, 6, 6) if layout == "hw" else (3, 6, 6))
    assert torch.bincount(s.y_train).tolist() == [16] * 5
    train, test = _sample_ids(s.x_train), _sample_ids(s.x_test)
    assert len(train) == 80 and len(test) == 20 and not train & test
    assert torch.allclose(s.x_train.mean(), torch.tensor(0.0), atol=1e-5)
    assert torch.allclose(s.x_train.std(), torch.tensor(1.0), atol=1e-2)


def test_splits_deterministic_by_seed(tmp_path) -> None:
    _ids_npz(tmp_path / "d.npz")
    a, b = (load_dataset(f"npz:{tmp_path / 'd.npz'}", seed=0) for _ in range(2))
    c = load_dataset(f"npz:{tmp_path / 'd.npz'}", seed=1)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert _sample_ids(a.x_test) != _sample_ids(c.x_test)


def test_npz_alternative_keys_and_official(tmp_path) -> None:
    _ids_npz(tmp_path / "alt.npz", keys=("images", "labels"))
    assert load_dataset("npz:alt.npz", data_dir=tmp_path).n_train == 80
    np.savez(
        tmp_path / "tt.npz",
        x_train=_images(10, (4, 4)),
        y_train=np.arange(10) % 2,
        x_test=_images(4, (4, 4)),
        y_test=np.arange(4) % 2,
    )
    s = load_dataset("npz:tt.npz", data_dir=tmp_path)
    assert (s.n_train, s.n_test) == (10, 4)
    assert load_dataset("npz:tt.npz", data_dir=tmp_path, split="paper").n_test == 2


def test_npz_errors(tmp_path) -> None:
    with pytest.raises(DataError, match="nope.npz not found"):
        load_dataset("npz:nope.npz", data_dir=tmp_path)
    np.savez(tmp_path / "k.npz", a=np.zeros(3), b=np.zeros(3))
    with pytest.raises(DataError, match=r"has arrays \['a', 'b'\]"):
        load_dataset(f"npz:{tmp_path / 'k.npz'}")
    (tmp_path / "z.npz").write_text("hello")
    with pytest.raises(DataError, match="not a readable .npz"):
        load_dataset(f"npz:{tmp_path / 'z.npz'}")
    np.savez(tmp_path / "m.npz", x=_images(5, (4, 4)), y=np.arange(4))
    with pytest.raises(DataError, match="5 images but 4 labels"):
        load_dataset(f"npz:{tmp_path / 'm.npz'}")
    np.savez(tmp_path / "c.npz", x=_images(5, (7, 7, 7)), y=np.arange(5))
    with pytest.raises(DataError, match="no channel axis"):
        load_dataset(f"npz:{tmp_path / 'c.npz'}")


def test_gray_to_colour_and_back(tmp_path) -> None:
    np.savez(tmp_path / "g.npz", x=_images(40, (8, 8)), y=_balanced_labels(40, 4))
    s = load_dataset(f"npz:{tmp_path / 'g.npz'}", input_shape=(3, 16, 16))
    assert s.input_shape == (3, 16, 16) and s.x_test.shape[1:] == (3, 16, 16)
    assert torch.equal(s.x_train[:, 0], s.x_train[:, 2])  # replicated channels
    assert abs(float(s.x_train.mean())) < 1e-5
    np.savez(tmp_path / "c.npz", x=_images(40, (8, 8, 3)), y=_balanced_labels(40, 4))
    g = load_dataset(f"npz:{tmp_path / 'c.npz'}", input_shape=(1, 4, 4))
    assert g.input_shape == (1, 4, 4)
    with pytest.raises(DataError, match="cannot map 3-channel images to 2"):
        load_dataset(f"npz:{tmp_path / 'c.npz'}", input_shape=(2, 4, 4))


def test_limit_is_balanced_and_deterministic(tmp_path) -> None:
    np.savez(tmp_path / "l.npz", x=_images(500, (4, 4)), y=_balanced_labels(500, 10))
    s = load_dataset(f"npz:{tmp_path / 'l.npz'}", limit=50)
    assert (s.n_train, s.n_test) == (50, 12)
    assert torch.bincount(s.y_train).tolist() == [5] * 10
    assert torch.equal(s.x_train, load_dataset(f"npz:{tmp_path / 'l.npz'}", limit=50).x_train)


def test_digits_default() -> None:
    s = load_dataset("digits")
    assert s.n_train + s.n_test == 1797 and s.n_test == pytest.approx(0.2 * 1797, abs=5)
    assert (s.input_shape, s.num_classes) == ((1, 8, 8), 10)
    with pytest.raises(DataError, match="no official test split"):
        load_dataset("digits", split="official")


def test_spec_errors() -> None:
    assert parse_spec("npz:a/b.npz") == ("npz", "a/b.npz")
    assert parse_spec("CIFAR10") == ("cifar10", None)
    with pytest.raises(DataError, match="unknown dataset 'imagenet'"):
        load_dataset("imagenet")
    with pytest.raises(DataError, match="needs a path"):
        load_dataset("npz")
    with pytest.raises(DataError, match="unknown split"):
        load_dataset("digits", split="random")


# --- text ----------------------------------------------------------------------------
def decode(ids: object) -> str:
    return "".join(VOCAB[int(i)] for i in np.asarray(ids).reshape(-1))


def test_vocabulary_and_normalisation() -> None:
    assert VOCAB_SIZE == 97 and VOCAB[0] == "\n" and VOCAB[1] == " " and VOCAB[95] == "~"
    text = "\u201cCaf\u00e9\u201d \u2014 it\u2019s\u2026\r\n\tok \u4e2d"
    assert decode(encode(text)) == '"Cafe" - it\'s...\n ok ' + VOCAB[UNK_ID]


def test_text_windows_and_split(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("abcdefghij" * 20, encoding="utf-8")
    (tmp_path / "b.txt").write_text("0123456789" * 20, encoding="utf-8")
    s = load_dataset("text:a.txt+b.txt", data_dir=tmp_path, context=8)
    n = (401 - 1) // 8  # 401 characters: two files joined by a newline
    assert (s.n_train, s.n_test) == (45, 5) and s.n_train + s.n_test == n
    assert (s.kind, s.num_classes, s.vocab, s.input_shape) == ("text", 97, VOCAB, (8,))
    assert torch.equal(s.x_train[:, 1:], s.y_train[:, :-1])  # y is x shifted by one
    corpus = encode("abcdefghij" * 20 + "\n" + "0123456789" * 20)
    windows = {tuple(corpus[i * 8 : i * 8 + 8]) for i in range(n)}
    got = {tuple(r) for r in torch.cat([s.x_train, s.x_test]).tolist()}
    assert got == windows
    other = load_dataset("text:a.txt+b.txt", data_dir=tmp_path, context=8, seed=3)
    assert not torch.equal(other.x_test, s.x_test)
    assert load_dataset("text:a.txt", data_dir=tmp_path, input_shape=(4,)).input_shape == (4,)
    assert load_dataset("text:a.txt", data_dir=tmp_path, context=4, limit=9).n_train == 9


def test_text_limit_spreads_over_corpus(tmp_path) -> None:
    # window i (context 8, stride 8) is the character chr(32 + i) repeated
    (tmp_path / "c.txt").write_text("".join(chr(32 + i // 8) for i in range(8 * 91)))
    s = load_dataset(f"text:{tmp_path / 'c.txt'}", context=8, limit=9)
    ids = sorted(int(w[0]) - 1 for w in s.x_train)  # vocabulary id 1 is chr(32)
    assert len(ids) == 9 and ids[-1] > 45  # not just the first windows of the corpus


def test_text_errors(tmp_path) -> None:
    with pytest.raises(DataError, match="missing.txt not found"):
        load_dataset("text:missing.txt", data_dir=tmp_path)
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02" * 50)
    with pytest.raises(DataError, match="looks binary"):
        load_dataset(f"text:{tmp_path / 'bin.txt'}")
    (tmp_path / "latin.txt").write_bytes("caf\u00e9 ".encode("latin-1") * 50)
    with pytest.raises(DataError, match="not UTF-8"):
        load_dataset(f"text:{tmp_path / 'latin.txt'}")
    (tmp_path / "short.txt").write_text("hello")
    with pytest.raises(DataError, match="need at least 129"):
        load_dataset(f"text:{tmp_path / 'short.txt'}")


# --- the real shared data ------------------------------------------------------------
def test_shared_images(shared_data) -> None:
    s = load_dataset("npz:images/cifar10-quarter-a.npz", data_dir=shared_data, limit=200)
    assert (s.n_train, s.n_test, s.num_classes, s.input_shape) == (200, 50, 10, (3, 32, 32))
    assert torch.bincount(s.y_train).tolist() == [20] * 10
    m = load_dataset(
        f"npz:{shared_data / 'images' / 'mnist-test.npz'}", input_shape=(3, 32, 32), limit=100
    )
    assert m.input_shape == (3, 32, 32) and m.num_classes == 10
    assert torch.equal(m.x_train[:, 0], m.x_train[:, 1])


def test_shared_text(shared_data) -> None:
    s = load_dataset("text:text/tinyshakespeare.txt", data_dir=shared_data, limit=300)
    assert (s.n_train, s.n_test, s.input_shape) == (300, 33, (64,))
    assert int((s.x_train == UNK_ID).sum()) == 0  # plain ASCII corpus: nothing unknown
    assert decode(s.x_train[0]).isprintable() or "\n" in decode(s.x_train[0])
