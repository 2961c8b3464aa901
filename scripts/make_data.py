#!/usr/bin/env python3
"""Make the datasets the documentation's results and the device check use, from the
official public archives (docs/guides/data.md says what each file is and where it is from).

    python scripts/make_data.py device-check             # cifar10-quarter-a + tinyshakespeare
    python scripts/make_data.py all --data-dir data      # every file
    python scripts/make_data.py all --archives ~/dl      # archives downloaded by hand
    python scripts/make_data.py --list                   # what there is, what is present
    python scripts/make_data.py --check                  # verify DIR/SHA256SUMS

Files go to DIR/images, DIR/text and DIR/power (DIR: --data-dir, default data/ in the
repository), each written whole (a temporary file, then a rename), and their sha256 to
DIR/SHA256SUMS (`sha256sum -c SHA256SUMS` works from DIR). A file already there that
matches its recorded checksum is kept; one that does not is an error unless --force.

Archives are downloaded into --archives DIR (default DATA_DIR/archives), or used from there
when a file of the archive's name is present. Each archive's checksum is checked against
the value its publisher gives (cited at each), and a made file that is known to be identical
to the copy the published results used is checked against that copy's sha256. No download
is ever unpickled: CIFAR-10 comes from the binary version, read record by record.
UNDERCAP_MAKE_DATA_OFFLINE=1 turns downloads off (a missing archive is then an error).

Exit status: 0 done, 1 --check found a file missing or changed, 2 a bad invocation or a
failure (one `error:` line on stderr; no partial file is left behind).

Standard library and numpy only; Python 3.8 and later.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import http.client
import io
import os
import re
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OFFLINE_ENV = "UNDERCAP_MAKE_DATA_OFFLINE"
USER_AGENT = "undercap-make-data/1.0 (Python urllib)"  # some hosts refuse urllib's default
TIMEOUT_S = 60.0
CHUNK = 1 << 20

#: CIFAR-10 selection: class c's images, in archive order, are permuted by
#: numpy.random.default_rng([CIFAR_SEED, split, c]) (split 0: training set, 1: test set);
#: quarter-a takes the first quarter of the permutation, quarter-b the second.
CIFAR_SEED = 2009
CIFAR_CLASSES = 10
CIFAR_RECORD = 1 + 3 * 32 * 32  # 1 label byte, then 1024 red, 1024 green, 1024 blue bytes
CIFAR_DIR = "cifar-10-batches-bin"
CIFAR_MEMBERS = {
    "train": tuple(f"{CIFAR_DIR}/data_batch_{i}.bin" for i in range(1, 6)),
    "test": (f"{CIFAR_DIR}/test_batch.bin",),
}

MNIST_MIRRORS = (
    # torchvision's mirrors (torchvision/datasets/mnist.py, MNIST.mirrors), the reliable first
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
IDX_IMAGES, IDX_LABELS = 0x00000803, 0x00000801  # idx magic numbers: ubyte, 3 or 1 dims

PVLIB_DATA = "https://raw.githubusercontent.com/pvlib/pvlib-python/v0.13.0/tests/data/"


class Failure(Exception):
    """A failure the user can act on: printed as one `error:` line, exit status 2."""


@dataclass(frozen=True)
class Archive:
    """A source file as published: where it is and the checksum its publisher gives."""

    name: str  # its file name in --archives
    urls: Tuple[str, ...]  # tried in order
    md5: Optional[str] = None
    sha256: Optional[str] = None


def _mnist(name: str, md5: str) -> Archive:
    """One of MNIST's four files, from the first mirror that answers."""
    return Archive(name, tuple(m + name for m in MNIST_MIRRORS), md5=md5)


ARCHIVES = {
    a.name: a
    for a in (
        # MD5 as given on the dataset page, https://www.cs.toronto.edu/~kriz/cifar.html
        Archive(
            "cifar-10-binary.tar.gz",
            ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",),
            md5="c32a1d4ab5d03f1284b67883e8d87530",
        ),
        # MD5s from torchvision (torchvision/datasets/mnist.py, MNIST.resources)
        _mnist("train-images-idx3-ubyte.gz", md5="f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        _mnist("train-labels-idx1-ubyte.gz", md5="d53e105ee54ea40749a09fcbcd1e9432"),
        _mnist("t10k-images-idx3-ubyte.gz", md5="9fb629c4189551a2d022fa330f9573f3"),
        _mnist("t10k-labels-idx1-ubyte.gz", md5="ec29112dd5afa0611ce80d1b7f02629c"),
        # NLTK's corpus; MD5 from NLTK's package index (nltk_data, gh-pages, index.xml:
        # <package id="gutenberg" ... checksum=...>, which nltk's downloader checks as MD5)
        Archive(
            "gutenberg.zip",
            (
                "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/"
                "packages/corpora/gutenberg.zip",
            ),
            md5="48c9c8605cd70b0230687557ee543633",
        ),
        # WikiText-2 v1 from its author's host (the original Salesforce S3 bucket is gone).
        # This copy's archive checksum is not published; its two members used here are
        # checked instead (each text file's sha256, OUTPUTS below).
        Archive("wikitext-2-v1.zip", ("https://wikitext.smerity.com/wikitext-2-v1.zip",)),
        # Karpathy's char-rnn repository, data/tinyshakespeare/input.txt (git blob 7dcb3a2)
        Archive(
            "tinyshakespeare-input.txt",
            (
                "https://raw.githubusercontent.com/karpathy/char-rnn/master/"
                "data/tinyshakespeare/input.txt",
            ),
            sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        ),
        # pvlib's test data at release v0.13.0 (BSD-3-Clause): NREL MIDC Baseline Measurement
        # System, Golden CO, 2018-10-14; NOAA SURFRAD Alamosa CO (slv), 2016 day 001
        Archive(
            "midc_20181014.txt",
            (PVLIB_DATA + "midc_20181014.txt",),
            sha256="e708134a2a4c98c8cff0b24e38bf0d1b4841b23efbdac575e1699737e16fd78d",
        ),
        Archive(
            "surfrad-slv16001.dat",
            (PVLIB_DATA + "surfrad-slv16001.dat",),
            sha256="8d681d07c9161812db4f82d0c43d24f002234cf5c9bbba147b39cb038c550f83",
        ),
    )
}

Maker = Callable[[Dict[str, Path]], bytes]  # archive name -> its local path, to file bytes


@dataclass(frozen=True)
class Output:
    """One file this script makes."""

    stem: str
    folder: str  # images, text or power
    suffix: str
    group: str
    archives: Tuple[str, ...]
    make: Maker
    #: the sha256 of the copy the published results used, where a file made from the
    #: official archive is verified identical to it (None: it differs, see the guide)
    published_sha256: Optional[str] = None

    @property
    def rel(self) -> str:
        return f"{self.folder}/{self.stem}{self.suffix}"


# --------------------------------------------------------------------------- helpers


def _digest(kind: str, path: Path) -> str:
    h = hashlib.new(kind)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all: a temporary file beside it, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> what open() would have made
        os.replace(tmp, str(path))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def npz_bytes(x: np.ndarray, y: np.ndarray) -> bytes:
    """np.savez_compressed's bytes: deterministic (its zip entries carry no timestamp)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, x=np.ascontiguousarray(x), y=np.ascontiguousarray(y))
    return buf.getvalue()


# --------------------------------------------------------------------------- archives


def _check_archive(archive: Archive, path: Path) -> None:
    for kind, want in (("md5", archive.md5), ("sha256", archive.sha256)):
        got = _digest(kind, path) if want else want
        if got != want:
            raise Failure(
                f"{path}: {kind.upper()} {got}, expected {want} (the "
                "published checksum): not the official archive, or a damaged download; "
                "delete it and run again"
            )


_PROGRESS = {"open": False}  # a progress line waits for its newline


def _progress(name: str, done: int, total: Optional[int]) -> None:
    size = f"{done / 1e6:.1f} of {total / 1e6:.1f} MB" if total else f"{done / 1e6:.1f} MB"
    sys.stderr.write(f"\rdownloading {name}: {size}   ")
    sys.stderr.flush()
    _PROGRESS["open"] = True


def _end_progress() -> None:
    if _PROGRESS["open"]:
        sys.stderr.write("\n")
        _PROGRESS["open"] = False


def _download(url: str, dest: Path) -> None:
    """`url` into `dest` through a temporary file and a rename; a progress line on stderr."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(dest.parent), prefix=f".{dest.name}.", suffix=".part")
    try:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=TIMEOUT_S) as r:
            total = int(r.headers.get("Content-Length") or 0) or None
            done, shown = 0, 0.0
            for block in iter(lambda: r.read(CHUNK), b""):
                out.write(block)
                done += len(block)
                if time.monotonic() - shown > 0.5:
                    _progress(dest.name, done, total)
                    shown = time.monotonic()
            if total and done != total:
                raise OSError(f"the download stopped at {done} of {total} bytes")
        _progress(dest.name, done, total)
        _end_progress()
        os.replace(tmp, str(dest))
    except BaseException:
        _end_progress()
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def obtain(archive: Archive, folder: Path, verify: bool) -> Path:
    """The archive's local path: found in `folder`, or downloaded into it (and checked)."""
    path = folder / archive.name
    downloaded = False
    if not path.is_file():
        reason = f"downloads are off ({OFFLINE_ENV} is set)"
        if not os.environ.get(OFFLINE_ENV):
            for url in archive.urls:
                try:
                    _download(url, path)
                    downloaded = True
                    break
                except (OSError, http.client.HTTPException, ValueError) as e:
                    reason = f"the download failed ({_one_line(e)})"
        if not downloaded:
            raise Failure(
                f"{archive.name} is not in {folder} and {reason}; download {archive.urls[0]} "
                f"by hand into {folder} (as {archive.name}) and run again with --archives {folder}"
            )
    if verify:
        try:
            _check_archive(archive, path)
        except Failure:
            if downloaded:
                path.unlink()  # a wrong download is not kept
            raise
    return path


# --------------------------------------------------------------------------- CIFAR-10


@lru_cache(maxsize=1)
def _cifar_records(archive: Path) -> Dict[str, np.ndarray]:
    """{"train": (50000, 3073), "test": (10000, 3073)} uint8 records of the binary version's
    batch files, read in one pass over the tar without extracting anything. A record is
    "<1 x label><3072 x pixel>": 1024 red, then 1024 green, then 1024 blue bytes, each
    channel row-major (https://www.cs.toronto.edu/~kriz/cifar.html, "Binary version")."""
    wanted = set(CIFAR_MEMBERS["train"] + CIFAR_MEMBERS["test"])
    found: Dict[str, np.ndarray] = {}
    with tarfile.open(str(archive), "r:gz") as tar:
        for info in tar:
            if info.name not in wanted or not info.isfile():
                continue
            f = tar.extractfile(info)
            data = f.read() if f is not None else b""
            if not data or len(data) % CIFAR_RECORD:
                raise Failure(f"{archive.name}: {info.name} is not whole CIFAR-10 records")
            found[info.name] = np.frombuffer(data, np.uint8).reshape(-1, CIFAR_RECORD)
    missing = sorted(wanted - set(found))
    if missing:
        raise Failure(f"{archive.name} has no member {missing[0]}: not the binary version")
    splits = {s: np.concatenate([found.pop(m) for m in ms]) for s, ms in CIFAR_MEMBERS.items()}
    if max(int(rec[:, 0].max()) for rec in splits.values()) >= CIFAR_CLASSES:
        raise Failure(f"{archive.name}: a label above {CIFAR_CLASSES - 1}: not CIFAR-10")
    return splits


def balanced_part(y: np.ndarray, split: int, part: int) -> np.ndarray:
    """Indices of quarter `part` (0 or 1) of each class, class by class, each class's
    indices in archive order: a quarter of every class, so the classes stay balanced."""
    picks = []
    for c in range(CIFAR_CLASSES):
        idx = np.flatnonzero(y == c)
        n = len(idx) // 4
        if n == 0:
            raise Failure(f"CIFAR-10 class {c} has fewer than 4 images: not the real archive")
        order = np.random.default_rng([CIFAR_SEED, split, c]).permutation(idx)
        picks.append(np.sort(order[part * n : (part + 1) * n]))
    return np.concatenate(picks)


def make_cifar(split: str, part: int, paths: Dict[str, Path]) -> bytes:
    """x (n, 32, 32, 3) uint8 HWC and y (n,) uint8 of one balanced quarter of a split."""
    records = _cifar_records(paths["cifar-10-binary.tar.gz"])[split]
    keep = records[balanced_part(records[:, 0], 0 if split == "train" else 1, part)]
    x = keep[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # CHW -> HWC
    return npz_bytes(x, keep[:, 0])


# --------------------------------------------------------------------------- MNIST


def read_idx(path: Path, magic: int, dims: int) -> np.ndarray:
    """An idx file (http://yann.lecun.com/exdb/mnist/: a big-endian magic number, then
    `dims` big-endian sizes, then the unsigned bytes), gzipped."""
    try:
        with gzip.open(str(path), "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise Failure(f"{path.name}: not a readable gzip file ({_one_line(e)})") from None
    head = 4 + 4 * dims
    if len(data) < head or int.from_bytes(data[:4], "big") != magic:
        raise Failure(f"{path.name}: not an idx file of {dims} dimension(s)")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    if len(data) != head + int(np.prod(shape)):
        raise Failure(f"{path.name}: {len(data) - head} data bytes for a shape {shape}")
    return np.frombuffer(data, np.uint8, offset=head).reshape(shape)


def make_mnist(prefix: str, paths: Dict[str, Path]) -> bytes:
    x = read_idx(paths[f"{prefix}-images-idx3-ubyte.gz"], IDX_IMAGES, 3)
    y = read_idx(paths[f"{prefix}-labels-idx1-ubyte.gz"], IDX_LABELS, 1)
    if x.shape[1:] != (28, 28) or len(x) != len(y) or (len(y) and y.max() > 9):
        raise Failure(f"MNIST {prefix}: {x.shape} images for {len(y)} labels: not MNIST")
    return npz_bytes(x, y)


# --------------------------------------------------------------------------- texts


def make_member(archive: str, member: str, paths: Dict[str, Path]) -> bytes:
    """One member of a zip archive, byte for byte."""
    with zipfile.ZipFile(str(paths[archive])) as z:
        try:
            info = z.getinfo(member)
        except KeyError:
            raise Failure(f"{archive} has no member {member}") from None
        return z.read(info)


def make_copy(archive: str, paths: Dict[str, Path]) -> bytes:
    return paths[archive].read_bytes()


# --------------------------------------------------------------------------- power


def _csv(rows: Sequence[Tuple[int, str]]) -> bytes:
    return ("time_s,ghi_w_m2\n" + "".join(f"{t},{v}\n" for t, v in rows)).encode()


def make_midc(paths: Dict[str, Path]) -> bytes:
    """MIDC's CSV export (pvlib's tests/data/midc_20181014.txt): `DATE (MM/DD/YYYY)`,
    `MST` (HH:MM, local standard time), `Global PSP [W/m^2]`, ... -> seconds from
    midnight, GHI rounded to 2 decimals."""
    lines = paths["midc_20181014.txt"].read_text(encoding="utf-8").splitlines()
    head = lines[0].split(",") if lines else []
    if "MST" not in head or "Global PSP [W/m^2]" not in head:
        raise Failure("midc_20181014.txt: no MST and Global PSP [W/m^2] columns")
    t_col, g_col = head.index("MST"), head.index("Global PSP [W/m^2]")
    rows = []
    for line in lines[1:]:
        f = line.split(",")
        hours, minutes = f[t_col].split(":")
        rows.append((int(hours) * 3600 + int(minutes) * 60, f"{float(f[g_col]):.2f}"))
    return _csv(rows)


def make_surfrad(paths: Dict[str, Path]) -> bytes:
    """A SURFRAD daily file (pvlib's tests/data/surfrad-slv16001.dat): 2 header lines, then
    year, jday, month, day, hour, min (UTC), dt, zen, dw_solar (GHI), ... -> seconds from
    midnight, GHI to 1 decimal as recorded."""
    lines = paths["surfrad-slv16001.dat"].read_text(encoding="utf-8").splitlines()
    rows = []
    for line in lines[2:]:
        f = line.split()
        if len(f) < 9:
            raise Failure("surfrad-slv16001.dat: a row without the dw_solar column")
        rows.append((int(f[4]) * 3600 + int(f[5]) * 60, f"{float(f[8]):.1f}"))
    return _csv(rows)


# --------------------------------------------------------------------------- catalogue


def _image(stem: str, group: str, archives: Tuple[str, ...], make: Maker) -> Output:
    return Output(stem, "images", ".npz", group, archives, make)


def _text(stem: str, archive: str, member: str, group: str, sha: str) -> Output:
    return Output(
        stem, "text", ".txt", group, (archive,), partial(make_member, archive, member), sha
    )


def _power(stem: str, archive: str, make: Maker, sha: str) -> Output:
    return Output(stem, "power", ".csv", "power", (archive,), make, sha)


_GUTENBERG = {  # NLTK's file name -> sha256 of the copy the published results used
    "austen-emma": "71b0923d75fcf2f1faa897b22da8de8e2476d7478a2b22388eb58a3420e00215",
    "austen-persuasion": "cec097657cbfeb62aafe178973f514fa07ab66a5e28ea025ebd5d51ca870e40f",
    "austen-sense": "57b169c7cfa502896dee25bd66616f61cc1d21084caf31f015176ee46fda9718",
    "chesterton-ball": "c6b6d4e8c09a3f49a09f37f4e47663d4d6f048b62d86c70ccafdfd8f27059a58",
    "chesterton-brown": "67027976205b4b30e367c704807f56c8ffac3e8ea6037d993e57ab1fe28447ec",
    "chesterton-thursday": "8b431a2a8db84089cd6f83fa66610c3b12c04114609df6e90137c0c58f2c5493",
    "milton-paradise": "49028a77c557de1459e96c026edbe72997be2d9015925f7baefb793cd6fe706f",
    "whitman-leaves": "93ebaf1dccc8f1514b4b1c2f52e64e81829113fc58cff63fb51ada0c72f99c3e",
}
_CIFAR = ("cifar-10-binary.tar.gz",)
_MNIST_TRAIN = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
_MNIST_TEST = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_SHAKESPEARE = "tinyshakespeare-input.txt"

OUTPUTS: Tuple[Output, ...] = (
    _image("cifar10-quarter-a", "cifar10", _CIFAR, partial(make_cifar, "train", 0)),
    _image("cifar10-quarter-b", "cifar10", _CIFAR, partial(make_cifar, "train", 1)),
    _image("cifar10-test-2500", "cifar10", _CIFAR, partial(make_cifar, "test", 0)),
    _image("mnist-train", "mnist", _MNIST_TRAIN, partial(make_mnist, "train")),
    _image("mnist-test", "mnist", _MNIST_TEST, partial(make_mnist, "t10k")),
    Output(
        "tinyshakespeare", "text", ".txt", "tinyshakespeare", (_SHAKESPEARE,),
        partial(make_copy, _SHAKESPEARE),
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    ),
    *(_text(n, "gutenberg.zip", f"gutenberg/{n}.txt", "gutenberg", h) for n, h in _GUTENBERG.items()),
    # WikiText-2 v1 (tokenised, <unk>): the zip's wikitext-2/wiki.{valid,test}.tokens
    _text(
        "wikitext2-valid", "wikitext-2-v1.zip", "wikitext-2/wiki.valid.tokens", "wikitext2",
        "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    ),
    _text(
        "wikitext2-test", "wikitext-2-v1.zip", "wikitext-2/wiki.test.tokens", "wikitext2",
        "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    ),
    _power(
        "ghi-golden-co-2018-10-14-cloudy", "midc_20181014.txt", make_midc,
        "a43bee5bf7c5a3f72daf12204507cd0d3992b95e11c5ba1b372a1c054675ffa6",
    ),
    _power(
        "ghi-alamosa-co-2016-01-01-clear", "surfrad-slv16001.dat", make_surfrad,
        "2b75c278247fa741933cef4fc4d705630d14a2bebd459b9f5183e024db1703f2",
    ),
)  # fmt: skip
GROUPS: Dict[str, Tuple[str, ...]] = {
    "all": tuple(o.stem for o in OUTPUTS),
    "device-check": ("cifar10-quarter-a", "tinyshakespeare"),  # what scripts/device-check.sh reads
}
for _o in OUTPUTS:
    GROUPS[_o.group] = GROUPS.get(_o.group, ()) + (_o.stem,)


def select(names: Sequence[str]) -> List[Output]:
    """The outputs named (file stems or groups), in catalogue order."""
    by_stem = {o.stem: o for o in OUTPUTS}
    wanted = set()
    for name in names:
        stem = Path(name).name.split(".")[0]  # also images/cifar10-quarter-a.npz
        if name in GROUPS:
            wanted.update(GROUPS[name])
        elif stem in by_stem:
            wanted.add(stem)
        else:
            raise Failure(f"unknown name {name!r}: see --list for the files and groups")
    return [o for o in OUTPUTS if o.stem in wanted]


# --------------------------------------------------------------------------- SHA256SUMS

_SUM_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def read_sums(data_dir: Path) -> Dict[str, str]:
    path = data_dir / "SHA256SUMS"
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _SUM_LINE.match(line)
        if m:
            sums[m.group(2)] = m.group(1).lower()
    return sums


def write_sums(data_dir: Path, sums: Dict[str, str]) -> None:
    text = "".join(f"{sums[rel]}  {rel}\n" for rel in sorted(sums))
    write_atomic(data_dir / "SHA256SUMS", text.encode())


# --------------------------------------------------------------------------- commands


def print_list(data_dir: Path) -> None:
    rows = [("name", "folder", "archive", "in " + str(data_dir), "url")]
    for o in OUTPUTS:
        present = "present" if (data_dir / o.rel).is_file() else "absent"
        rows.append((o.stem, o.folder, o.archives[0], present, ARCHIVES[o.archives[0]].urls[0]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4])
    groups = ", ".join(f"{g} ({len(s)})" for g, s in GROUPS.items())
    print(f"groups: {groups}")


def check(data_dir: Path, outputs: Optional[List[Output]]) -> int:
    """Verify the recorded checksums: 0 all good, 1 a file missing or changed."""
    sums = read_sums(data_dir)
    if not sums:
        print(f"missing: {data_dir / 'SHA256SUMS'} (nothing made there yet)")
        return 1
    rels = sorted(sums) if outputs is None else [o.rel for o in outputs]
    bad = 0
    for rel in rels:
        path = data_dir / rel
        if rel not in sums or not path.is_file():
            state = "missing (not recorded)" if rel not in sums else "missing"
        else:
            state = "ok" if _digest("sha256", path) == sums[rel] else "changed"
        bad += state != "ok"
        print(f"{state}: {rel}")
    print(f"{len(rels) - bad} of {len(rels)} files match {data_dir / 'SHA256SUMS'}")
    return 1 if bad else 0


class Builder:
    """Makes outputs into one data folder, getting each archive once."""

    def __init__(self, data_dir: Path, archive_dir: Path, verify: bool, force: bool) -> None:
        self.data_dir, self.archive_dir = data_dir, archive_dir
        self.verify, self.force = verify, force
        self.paths: Dict[str, Path] = {}
        self.sums = read_sums(data_dir)

    def archive_paths(self, output: Output) -> Dict[str, Path]:
        for name in output.archives:
            if name not in self.paths:
                self.paths[name] = obtain(ARCHIVES[name], self.archive_dir, self.verify)
        return self.paths

    def existing(self, output: Output) -> Optional[str]:
        """The sha256 of the file already there, or None; refuses one that differs from
        its record (unless --force)."""
        path = self.data_dir / output.rel
        if not path.is_file():
            return None
        actual = _digest("sha256", path)
        recorded = self.sums.get(output.rel)
        if recorded is not None and recorded != actual and not self.force:
            raise Failure(
                f"{path} differs from its checksum in {self.data_dir / 'SHA256SUMS'} (changed "
                "or damaged): move it away, or run again with --force to make it anew"
            )
        return actual

    def make(self, output: Output) -> Tuple[str, str]:
        """(sha256, what happened) for one output."""
        actual = self.existing(output)
        if actual is not None and self.sums.get(output.rel) == actual and not self.force:
            return actual, "kept (matches SHA256SUMS)"
        paths = self.archive_paths(output)
        try:
            data = output.make(paths)
        except (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile) as e:
            names = " or ".join(str(paths[a]) for a in output.archives)
            raise Failure(
                f"cannot read {names} ({_one_line(e)}): a damaged or incomplete archive; "
                "delete it and run again"
            ) from None
        digest = hashlib.sha256(data).hexdigest()
        want = output.published_sha256
        if self.verify and want and digest != want:
            raise Failure(
                f"{output.rel} as made has sha256 {digest}, not the published copy's {want}: "
                "its archive is not the one verified (use --no-verify to keep it anyway)"
            )
        if actual is not None and actual != digest and not self.force:
            raise Failure(
                f"{self.data_dir / output.rel} exists, is not in SHA256SUMS and differs from "
                "what this makes: move it away, or run again with --force"
            )
        write_atomic(self.data_dir / output.rel, data)
        self.sums[output.rel] = digest
        write_sums(self.data_dir, self.sums)
        same = self.verify and want is not None
        return digest, "made" + (", identical to the published copy" if same else "")


def make_all(outputs: List[Output], maker: Builder) -> int:
    done = []
    for output in outputs:
        digest, what = maker.make(output)
        print(f"{output.rel}: {what}")
        done.append((digest, output.rel))
    print(f"\n{len(done)} file(s) in {maker.data_dir} (sha256, also in SHA256SUMS there):")
    for digest, rel in done:
        print(f"{digest}  {rel}")
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see --help)\n")


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = _Parser(
        prog="make_data.py",
        description="Make the datasets of the documentation's results and the device check "
        "from the official public archives.",
        epilog="NAME: a file (cifar10-quarter-a, tinyshakespeare, ...) or a group: "
        + ", ".join(GROUPS)
        + ". See --list.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="files or groups to make")
    p.add_argument(
        "--data-dir",
        default=str(REPO / "data"),
        metavar="DIR",
        help="where the files go, in images/, text/ and power/ (default: data/ in the repository)",
    )
    p.add_argument(
        "--archives",
        metavar="DIR",
        help="archives downloaded by hand; downloads are kept there (default: DATA_DIR/archives)",
    )
    p.add_argument("--list", action="store_true", help="list the files, sources and presence")
    p.add_argument("--check", action="store_true", help="verify DIR/SHA256SUMS (exit 1 if not)")
    p.add_argument(
        "--force", action="store_true", help="make files again even where they were changed"
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the archives' published checksums and the published copy's (for other "
        "archives than the official ones: the files made then differ from the published copy)",
    )
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    if args.list:
        print_list(data_dir)
        return 0
    if args.check:
        return check(data_dir, select(args.names) if args.names else None)
    if not args.names:
        print_list(data_dir)
        print(
            "error: name the files to make (or all; device-check for the device check)",
            file=sys.stderr,
        )
        return 2
    outputs = select(args.names)
    archive_dir = Path(args.archives) if args.archives else data_dir / "archives"
    if args.archives and not archive_dir.is_dir():
        raise Failure(f"--archives {archive_dir}: no such folder")
    return make_all(outputs, Builder(data_dir, archive_dir, not args.no_verify, args.force))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except Failure as e:
        message = str(e)
    except (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile) as e:
        message = _one_line(e)
    except (ValueError, IndexError) as e:  # a malformed row in a source file
        message = f"an archive's contents are not as expected: {_one_line(e)}"
    except KeyboardInterrupt:
        message = "interrupted"
    _end_progress()
    print(f"error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
