"""scripts/make_data.py: the datasets made from archives in the official formats. Small fake
archives (a few images per class, short texts) stand in for the real ones, so the files made
are proportionally small; downloads are off in every run (UNDERCAP_MAKE_DATA_OFFLINE), so no
test touches the network. The two power CSVs are also made from pvlib's real files
(tests/fixtures/pvlib) and checked byte for byte against the published copy's checksums."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SHARED_DATA

SCRIPT = REPO / "scripts" / "make_data.py"
PVLIB = REPO / "tests" / "fixtures" / "pvlib"
PER_CLASS_PER_BATCH, TEST_PER_CLASS = 8, 8  # 40 training images a class: quarters of 10
GUTENBERG = [
    "austen-emma",
    "austen-persuasion",
    "austen-sense",
    "chesterton-ball",
    "chesterton-brown",
    "chesterton-thursday",
    "milton-paradise",
    "whitman-leaves",
]
IMAGES = [
    "cifar10-quarter-a",
    "cifar10-quarter-b",
    "cifar10-test-2500",
    "mnist-train",
    "mnist-test",
]
TEXTS = ["tinyshakespeare", *GUTENBERG, "wikitext2-valid", "wikitext2-test"]
POWER = ["ghi-golden-co-2018-10-14-cloudy", "ghi-alamosa-co-2016-01-01-clear"]
ALL = [f"images/{n}.npz" for n in IMAGES] + [f"text/{n}.txt" for n in TEXTS]
ALL += [f"power/{n}.csv" for n in POWER]


def make_data(*args: object, check: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "UNDERCAP_MAKE_DATA_OFFLINE": "1"}
    cmd = [sys.executable, str(SCRIPT), *map(str, args)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The run failed with exit status 2 and exactly one line on stderr, `error: ...`."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- fake archives


def _cifar_image(index: int, rng: np.random.Generator) -> np.ndarray:
    """A (3, 32, 32) CHW image whose first two red pixels spell its index."""
    chw = rng.integers(0, 256, size=(3, 32, 32), dtype=np.uint8)
    chw[0, 0, 0], chw[0, 0, 1] = index // 256, index % 256
    return chw


def _cifar_batch(labels: list[int], start: int, rng: np.random.Generator) -> bytes:
    records = [
        bytes([label]) + _cifar_image(start + i, rng).tobytes() for i, label in enumerate(labels)
    ]
    return b"".join(records)


def fake_cifar(path: Path) -> dict[str, np.ndarray]:
    """cifar-10-binary.tar.gz in the binary version's layout; returns the CHW images and
    labels written, in archive order (training set first)."""
    rng = np.random.default_rng(0)
    members, labels = {}, []
    for b in range(1, 6):
        batch = [int(c) for c in rng.permutation(np.repeat(np.arange(10), PER_CLASS_PER_BATCH))]
        members[f"data_batch_{b}.bin"] = _cifar_batch(batch, len(labels), rng)
        labels += batch
    test = [int(c) for c in rng.permutation(np.repeat(np.arange(10), TEST_PER_CLASS))]
    members["test_batch.bin"] = _cifar_batch(test, len(labels), rng)
    members["batches.meta.txt"] = b"airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\n"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = b"".join(members[f"data_batch_{b}.bin"] for b in range(1, 6))
    raw += members["test_batch.bin"]
    rec = np.frombuffer(raw, np.uint8).reshape(-1, 3073)
    return {"labels": rec[:, 0], "chw": rec[:, 1:].reshape(-1, 3, 32, 32), "n_train": 400}


def _idx(path: Path, magic: int, array: np.ndarray) -> None:
    head = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    path.write_bytes(gzip.compress(head + array.astype(np.uint8).tobytes()))


def fake_mnist(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1)
    out = {}
    for prefix, n in (("train", 30), ("t10k", 20)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = np.arange(n, dtype=np.uint8) % 10
        _idx(folder / f"{prefix}-images-idx3-ubyte.gz", 0x803, x)
        _idx(folder / f"{prefix}-labels-idx1-ubyte.gz", 0x801, y)
        out[prefix] = (x, y)
    return out


def fake_zip(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)


MIDC_HEAD = (
    "DATE (MM/DD/YYYY),MST,Global PSP [W/m^2],Global PSP (Accumulated) [kWhr/m^2],"
    "Temperature @ 2m [deg C]\n"
)
MIDC_ROWS = "10/14/2018,00:00,-7.69272,4.6,-4.6\n10/14/2018,00:01,430.6,0,-4.6\n"
SURFRAD = (
    " Alamosa\n   37.70  105.92 2317 m version 1\n"
    " 2016   1  1  1  0  0  0.000  91.65    -1.8 0    -0.8 0\n"
    " 2016   1  1  1 12  1 12.017  61.83   312.0 0    50.8 0\n"
)


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A folder of fake archives under the official names, and what they hold."""
    folder = tmp_path_factory.mktemp("archives")
    texts = {f"gutenberg/{n}.txt": f"{n}\r\nline two\n".encode() for n in GUTENBERG}
    fake_zip(folder / "gutenberg.zip", {**texts, "gutenberg/README": b"readme"})
    wiki = {f"wikitext-2/wiki.{s}.tokens": f" \n = {s} = \n <unk>\n".encode() for s in ("valid", "test", "train")}  # fmt: skip
    fake_zip(folder / "wikitext-2-v1.zip", wiki)
    (folder / "tinyshakespeare-input.txt").write_bytes(b"First Citizen:\nBefore we proceed\n")
    (folder / "midc_20181014.txt").write_text(MIDC_HEAD + MIDC_ROWS)
    (folder / "surfrad-slv16001.dat").write_text(SURFRAD)
    return {
        "dir": folder,
        "cifar": fake_cifar(folder / "cifar-10-binary.tar.gz"),
        "mnist": fake_mnist(folder),
        "texts": {**texts, **wiki},
    }


@pytest.fixture(scope="module")
def made(archives: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every file, made once from the fake archives."""
    data = tmp_path_factory.mktemp("made") / "data"
    proc = make_data("all", "--data-dir", data, "--archives", archives["dir"], "--no-verify")
    assert proc.returncode == 0, proc.stderr
    return data


# --------------------------------------------------------------------------- tests


def test_every_file_is_made_with_its_checksum_recorded(made: Path) -> None:
    files = sorted(p.relative_to(made).as_posix() for p in made.rglob("*") if p.is_file())
    assert files == sorted([*ALL, "SHA256SUMS"])  # nothing else: no temporary files left
    lines = (made / "SHA256SUMS").read_text().splitlines()
    assert lines == sorted(lines, key=lambda ln: ln.split("  ")[1])
    assert lines == [f"{_sha(made / rel)}  {rel}" for rel in sorted(ALL)]
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=made, check=True)
    proc = make_data("--check", "--data-dir", made, check=True)
    assert proc.stdout.count("ok: ") == len(ALL)


def test_cifar_quarters_are_balanced_disjoint_and_hwc(made: Path, archives: dict) -> None:
    src = archives["cifar"]
    seen = {}
    for name, per_class in (("quarter-a", 10), ("quarter-b", 10), ("test-2500", 2)):
        with np.load(made / "images" / f"cifar10-{name}.npz") as f:
            x, y = f["x"], f["y"]
        assert x.dtype == np.uint8 and y.dtype == np.uint8
        assert x.shape == (10 * per_class, 32, 32, 3) and y.shape == (10 * per_class,)
        assert np.bincount(y, minlength=10).tolist() == [per_class] * 10
        index = x[:, 0, 0, 0].astype(int) * 256 + x[:, 0, 1, 0]  # the index each image spells
        assert np.array_equal(x, src["chw"][index].transpose(0, 2, 3, 1))  # CHW -> HWC
        assert np.array_equal(y, src["labels"][index])
        in_test = index >= src["n_train"]
        assert in_test.all() if name == "test-2500" else not in_test.any()
        seen[name] = set(index.tolist())
    assert not seen["quarter-a"] & seen["quarter-b"]


def test_mnist_is_the_idx_files(made: Path, archives: dict) -> None:
    for name, prefix in (("mnist-train", "train"), ("mnist-test", "t10k")):
        with np.load(made / "images" / f"{name}.npz") as f:
            x, y = f["x"], f["y"]
        want_x, want_y = archives["mnist"][prefix]
        assert x.dtype == np.uint8 and x.shape == want_x.shape == (len(want_x), 28, 28)
        assert np.array_equal(x, want_x) and np.array_equal(y, want_y)


def test_texts_are_the_members_byte_for_byte(made: Path, archives: dict) -> None:
    texts = archives["texts"]
    for n in GUTENBERG:
        assert (made / "text" / f"{n}.txt").read_bytes() == texts[f"gutenberg/{n}.txt"]
    for s in ("valid", "test"):
        want = texts[f"wikitext-2/wiki.{s}.tokens"]
        assert (made / "text" / f"wikitext2-{s}.txt").read_bytes() == want
    shakespeare = (archives["dir"] / "tinyshakespeare-input.txt").read_bytes()
    assert (made / "text" / "tinyshakespeare.txt").read_bytes() == shakespeare


def test_power_csvs_are_seconds_and_ghi(made: Path) -> None:
    golden = (made / "power" / "ghi-golden-co-2018-10-14-cloudy.csv").read_text()
    assert golden == "time_s,ghi_w_m2\n0,-7.69\n60,430.60\n"
    alamosa = (made / "power" / "ghi-alamosa-co-2016-01-01-clear.csv").read_text()
    assert alamosa == "time_s,ghi_w_m2\n0,-1.8\n43260,312.0\n"


def test_deterministic_and_a_rerun_keeps_what_is_there(
    made: Path, archives: dict, tmp_path: Path
) -> None:
    again = tmp_path / "data"
    args = ("--archives", archives["dir"], "--no-verify")
    make_data("all", "--data-dir", again, *args, check=True)
    assert (again / "SHA256SUMS").read_bytes() == (made / "SHA256SUMS").read_bytes()
    proc = make_data("cifar10", "tinyshakespeare", "--data-dir", again, *args, check=True)
    assert proc.stdout.count("kept (matches SHA256SUMS)") == 4
    assert f"{_sha(again / 'text/tinyshakespeare.txt')}  text/tinyshakespeare.txt" in proc.stdout


def test_a_changed_file_is_refused_checked_and_remade_with_force(
    made: Path, archives: dict, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(made, data)
    changed = data / "text" / "austen-emma.txt"
    original = changed.read_bytes()
    changed.write_bytes(b"edited\n")
    args = ("--data-dir", data, "--archives", archives["dir"], "--no-verify")
    line = one_error_line(make_data("austen-emma", *args))
    assert "austen-emma.txt" in line and "--force" in line
    assert changed.read_bytes() == b"edited\n"
    (data / "power" / "ghi-alamosa-co-2016-01-01-clear.csv").unlink()
    proc = make_data("--check", "--data-dir", data)
    assert proc.returncode == 1
    assert "changed: text/austen-emma.txt" in proc.stdout.splitlines()
    assert "missing: power/ghi-alamosa-co-2016-01-01-clear.csv" in proc.stdout.splitlines()
    assert sum(not ln.startswith("ok: ") for ln in proc.stdout.splitlines()) == 3  # + a total
    make_data("gutenberg", "power", *args, "--force", check=True)
    assert changed.read_bytes() == original
    make_data("--check", "--data-dir", data, check=True)


def test_a_corrupt_archive_is_one_error_line_and_no_file(archives: dict, tmp_path: Path) -> None:
    folder = tmp_path / "archives"
    folder.mkdir()
    whole = (archives["dir"] / "cifar-10-binary.tar.gz").read_bytes()
    (folder / "cifar-10-binary.tar.gz").write_bytes(whole[: len(whole) // 2])
    fake_zip(folder / "gutenberg.zip", {"gutenberg/other.txt": b"x"})
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x03junk"))
    shutil.copy(archives["dir"] / "t10k-labels-idx1-ubyte.gz", folder)
    data = tmp_path / "data"
    for name, words in (
        ("cifar10-test-2500", ""),
        ("milton-paradise", "no member gutenberg/milton-paradise.txt"),
        ("mnist-test", "t10k-images-idx3-ubyte.gz"),
    ):
        proc = make_data(name, "--data-dir", data, "--archives", folder, "--no-verify")
        assert words in one_error_line(proc)
    assert not data.exists() or [p for p in data.rglob("*") if p.is_file()] == []


def test_a_missing_archive_offline_names_its_url(tmp_path: Path) -> None:
    empty = tmp_path / "archives"
    empty.mkdir()
    line = one_error_line(
        make_data("device-check", "--data-dir", tmp_path / "d", "--archives", empty)
    )
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz" in line
    assert f"--archives {empty}" in line
    assert not (tmp_path / "d" / "images").exists()


@pytest.mark.parametrize(
    "name, archive", [("cifar10-test-2500", "MD5"), ("tinyshakespeare", "SHA256")]
)
def test_an_archive_that_is_not_the_official_one_is_refused(
    archives: dict, tmp_path: Path, name: str, archive: str
) -> None:
    """Without --no-verify the publisher's checksum is checked (the fakes do not match)."""
    data = tmp_path / "data"
    line = one_error_line(make_data(name, "--data-dir", data, "--archives", archives["dir"]))
    assert f": {archive} " in line and "expected" in line
    assert not data.exists() or [p for p in data.rglob("*") if p.is_file()] == []


def test_bad_invocations_are_one_line(archives: dict, tmp_path: Path) -> None:
    proc = make_data("--data-dir", tmp_path)
    assert "cifar10-quarter-a" in proc.stdout and "all" in one_error_line(proc)
    assert "nonesuch" in one_error_line(make_data("nonesuch", "--data-dir", tmp_path))
    assert "--bogus" in one_error_line(make_data("--bogus"))
    a_file = tmp_path / "file"
    a_file.write_text("")
    missing = one_error_line(make_data("power", "--data-dir", tmp_path, "--archives", a_file))
    assert "--archives" in missing
    args = ("--archives", archives["dir"], "--no-verify")
    unwritable = one_error_line(make_data("power", "--data-dir", a_file / "sub", *args))
    assert str(a_file) in unwritable  # a data folder that cannot be made


def test_list_says_what_is_present(made: Path) -> None:
    proc = make_data("--list", "--data-dir", made, check=True)
    rows = {ln.split()[0]: ln.split() for ln in proc.stdout.splitlines()}
    assert rows["cifar10-quarter-a"][1:4] == ["images", "cifar-10-binary.tar.gz", "present"]
    assert rows["wikitext2-test"][-1] == "https://wikitext.smerity.com/wikitext-2-v1.zip"
    absent = make_data("--list", "--data-dir", made / "nowhere", check=True).stdout
    assert "present" not in absent and absent.count("absent") == len(ALL)


def test_power_from_pvlibs_files_is_the_published_copy(tmp_path: Path) -> None:
    """pvlib's real test files -> the published CSVs, byte for byte (the script checks each
    file's sha256 against the published copy's unless --no-verify; so does this test, and
    against the private copy's SHA256SUMS where that folder is present)."""
    folder = tmp_path / "archives"
    folder.mkdir()
    for gz in PVLIB.glob("*.gz"):
        (folder / gz.stem).write_bytes(gzip.decompress(gz.read_bytes()))
    data = tmp_path / "data"
    proc = make_data("power", "--data-dir", data, "--archives", folder, check=True)
    assert proc.stdout.count("identical to the published copy") == 2
    want = {
        "power/ghi-golden-co-2018-10-14-cloudy.csv": (
            "a43bee5bf7c5a3f72daf12204507cd0d3992b95e11c5ba1b372a1c054675ffa6"
        ),
        "power/ghi-alamosa-co-2016-01-01-clear.csv": (
            "2b75c278247fa741933cef4fc4d705630d14a2bebd459b9f5183e024db1703f2"
        ),
    }
    assert {rel: _sha(data / rel) for rel in want} == want
    sums = SHARED_DATA / "SHA256SUMS"
    if sums.is_file():
        published = dict(ln.split()[::-1] for ln in sums.read_text().splitlines() if ln)
        assert {rel: published[rel] for rel in want} == want


def test_published_checksums_match_the_copy_the_results_used() -> None:
    """The sha256 the script checks made files against is the published copy's (where that
    copy's folder is present); only the CIFAR-10 and MNIST files are not checked."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_data", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_data"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    pinned = {o.rel: o.published_sha256 for o in module.OUTPUTS}
    assert sorted(pinned) == sorted(ALL)
    assert [rel for rel, sha in pinned.items() if sha is None] == [
        f"images/{n}.npz" for n in IMAGES
    ]
    sums = SHARED_DATA / "SHA256SUMS"
    if not sums.is_file():
        pytest.skip(f"no published copy at {SHARED_DATA}")
    published = dict(ln.split()[::-1] for ln in sums.read_text().splitlines() if ln)
    assert {rel: published[rel] for rel, sha in pinned.items() if sha} == {
        rel: sha for rel, sha in pinned.items() if sha
    }
