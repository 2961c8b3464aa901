"""What users install: the built wheel in a fresh virtual environment (not the
editable tree), running `undercap devices` and a small `undercap run` on a simulated
Jetson Nano from outside the repository.

The fresh venv needs a torch: UNDERCAP_WHEEL_TORCH names it (the Makefile passes its
TORCH, a local CPU build here); by default the torch this interpreter runs. Set
UNDERCAP_WHEEL_TORCH=skip to leave the test out (CI's Python 3.8 floor run does: its
torch is a multi-GB download, and the JetPack 6 job installs the wheel for real).
Where no package index (nor find-links folder) offers what the install needs, the
test skips and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "undercap"


def torch_requirement(env: Optional[str], running_version: str) -> str:
    """What the fresh venv installs: UNDERCAP_WHEEL_TORCH, else the running torch's
    release. Its local label ('+cu117', '+cpu') names a build no index resolves by
    that pin (PEP 440: a local label only matches where the index serves it), so it
    is dropped and pip picks that release's build (from its cache where it has one)."""
    if env:
        return env
    return "torch==" + running_version.split("+", 1)[0]


def _torch_requirement() -> str:
    req = os.environ.get("UNDERCAP_WHEEL_TORCH")
    if req == "skip":
        pytest.skip("UNDERCAP_WHEEL_TORCH=skip")
    import torch

    return torch_requirement(req, torch.__version__)


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _unavailable(name: str, release: Optional[str] = None) -> Optional[str]:
    """Why pip cannot get `name` (at `release`, any local label) from what it is set to
    use here: its index, extra indexes, find-links (pip.conf, PIP_* variables); None
    when it can. A few seconds: `pip index versions` reads the index page only, with
    a short timeout and no retries (an unreachable index fails at once)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", name, "--timeout", "10",
           "--retries", "0", "--disable-pip-version-check"]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, env=_pip_env(), capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        return f"no package index answered for {name} within 120 s"
    if "unknown command" in proc.stderr:  # pip < 21.2 has no `pip index`: try the install
        return None
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    if proc.returncode != 0:
        return f"no package index offers {name} (`pip index versions {name}`: {last})"
    if release is None:
        return None
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Available")), "")
    found = {v.strip().split("+", 1)[0] for v in line.partition(":")[2].split(",")}
    if release not in found:
        return f"no package index offers {name}=={release} (it offers {line.strip()})"
    return None


def _skip_without_an_index(torch_req: str) -> None:
    """Skip, saying why, where pip has nowhere to install the fresh venv from: the
    torch requirement (unless a wheel file) and the wheel's other direct dependencies.
    Where an index answers, the test runs (and a failing install is a failure)."""
    name, _, release = torch_req.partition("==")
    torch_probe = [] if Path(torch_req).is_file() else [(name.strip(), release.strip() or None)]
    others = [("numpy", None), ("tqdm", None), ("scikit-learn", None)]  # sklearn: [digits]
    for name, release in torch_probe + others:
        why = _unavailable(name, release)
        if why is not None:
            pytest.skip(f"needs a package index: {why}")


@pytest.mark.parametrize(
    ("env", "running", "want"),
    [
        (None, "2.0.1+cu117", "torch==2.0.1"),
        ("", "2.13.0+cpu", "torch==2.13.0"),
        (None, "2.1.0", "torch==2.1.0"),
        (
            "/wheels/torch-2.1.0-cp310-linux_aarch64.whl",
            "2.1.0",
            "/wheels/torch-2.1.0-cp310-linux_aarch64.whl",
        ),
    ],
)
def test_torch_pin_drops_the_local_label(env, running, want) -> None:
    assert torch_requirement(env, running) == want


def _sh(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        args, cwd=cwd, env=_pip_env(), capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _build_wheel(out: Path) -> Path:
    """With this venv's setuptools where it reads pyproject.toml's [project] table
    (>= 64, as the build-system asks; no index needed), else in pip's isolated build."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("setuptools").split(".")[0])
    except PackageNotFoundError:
        major = 0
    isolation = ["--no-build-isolation"] if major >= 64 else []
    _sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, str(REPO),
        "-w", str(out), cwd=out.parent)  # fmt: skip
    (wheel,) = out.glob("undercap-*.whl")
    return wheel


def test_wheel_carries_every_data_file(tmp_path: Path) -> None:
    """Every non-Python file of the package (device specs, py.typed) is in the wheel."""
    wheel = _build_wheel(tmp_path / "dist")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = {
        "undercap/" + p.relative_to(SRC).as_posix()
        for p in SRC.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc")
    }
    assert data and data <= names, sorted(data - names)
    assert "undercap/devices/simulated/specs/jetson-nano.toml" in names


def test_wheel_in_a_fresh_venv_runs_the_digits_job(tmp_path: Path) -> None:
    torch_req = _torch_requirement()
    _skip_without_an_index(torch_req)
    wheel = _build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    _sh(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    py, uc = venv / "bin" / "python", venv / "bin" / "undercap"
    _sh(str(py), "-m", "pip", "install", "-q", torch_req, f"{wheel}[digits]", cwd=tmp_path)
    where = _sh(str(py), "-c", "import undercap; print(undercap.__file__)", cwd=tmp_path)
    assert str(venv) in where.stdout and str(REPO) not in where.stdout  # not the tree

    devices = json.loads(_sh(str(uc), "devices", "--json", "--no-nvml", cwd=tmp_path).stdout)
    names = {d["name"] for d in devices}
    assert {"sim:jetson-nano", "sim:jetson-tx2nx", "sim:jetson-orin-nano"} <= names, names

    out = tmp_path / "run"
    proc = _sh(str(uc), "run", "--device", "sim:jetson-nano", "--model", "small-cnn",
               "--proxy", "digits", "--proxy-limit", "360", "--proxy-split-seed", "1",
               "--target", "digits", "--batch-sizes", "16..128", "--target-accuracy", "0.9",
               "--max-samples", "12000", "--eval-every", "128", "--estimate-seeds", "1",
               "--power-limit", "3.5", "--torch-device", "cpu", "--no-progress",
               "-o", str(out), cwd=tmp_path)  # fmt: skip
    assert "simulated device" in proc.stdout
    train = json.loads((out / "train.json").read_text())
    assert train["reached"] and train["simulated"] and train["peak_power_w"] <= 3.5


def test_no_package_index_is_a_skip_with_its_reason(monkeypatch) -> None:
    """Where pip has no index and no find-links (offline, or an index that does not
    answer), the fresh-venv test skips and says why, within seconds."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with pytest.raises(pytest.skip.Exception, match="needs a package index: no package"):
        _skip_without_an_index("torch==2.0.1")
    assert "tqdm" in (_unavailable("tqdm") or "")
