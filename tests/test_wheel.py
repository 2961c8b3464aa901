"""What users install: the built wheel in a fresh virtual environment (not the
editable tree), running `undercap devices` and a small `undercap run` on a simulated
Jetson Nano from outside the repository.

The fresh venv needs a torch: UNDERCAP_WHEEL_TORCH names it (the Makefile passes its
TORCH, a local CPU build here); by default the torch this interpreter runs. Set
UNDERCAP_WHEEL_TORCH=skip to leave the test out (CI's Python 3.8 floor run does: its
torch is a multi-GB download, and the JetPack 6 job installs the wheel for real)."""

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
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
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
