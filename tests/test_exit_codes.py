"""Exit codes a script can rely on (README, "Exit codes"): 0 target reached, 3 ran fine
but missed the target (with the best accuracy on one line), 2 a user error, 130
Ctrl-C, 141 the reader of stdout went away; and `train --from-selection` taking the
data flags of the command line over the selection's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from undercap._compat import run_captured
from undercap.cli import main
from undercap.errors import EXIT_BROKEN_PIPE, EXIT_TARGET_NOT_REACHED, EXIT_USER_ERROR

REPO = Path(__file__).resolve().parents[1]
TRAIN = [
    "train", "--device", "sim:jetson-nano", "--model", "small-cnn", "--dataset", "digits",
    "--limit", "400", "--batch-size", "32", "--freq-mhz", "614.4", "--eval-every", "128",
    "--no-progress", "--torch-device", "cpu",
]  # fmt: skip


def _last_err_line(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_train_that_misses_its_target_exits_3_with_the_best_accuracy(tmp_path, capsys) -> None:
    out = tmp_path / "t.json"
    argv = [*TRAIN, "--target-accuracy", "0.999", "--max-samples", "512", "-o", str(out)]
    assert main(argv) == EXIT_TARGET_NOT_REACHED == 3
    captured = capsys.readouterr()
    result = json.loads(out.read_text())
    best = max(c["accuracy"] for c in result["curve"])
    line = captured.err.strip().splitlines()[-1]
    assert (
        line
        == f"undercap: target 99.9% not reached: best accuracy {best:.2%} in 512 samples (exit 3)"
    )
    assert "target not reached to target" not in captured.out  # the summary reads right
    assert f"best {best:.2%} (target not reached)" in captured.out


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_run_that_misses_its_target_exits_3(tmp_path, capsys) -> None:
    argv = ["run", "--device", "sim:jetson-nano", "--model", "small-cnn", "--batch-sizes",
            "16,64", "--max-samples", "1024", "--eval-every", "128", "--torch-device", "cpu",
            "--no-progress", "--proxy", "digits", "--proxy-limit", "300", "--target", "digits",
            "--target-limit", "400", "--power-limit", "3.5", "--proxy-accuracy", "0.6",
            "--target-accuracy", "0.999", "--estimate-seeds", "1", "-o", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == EXIT_TARGET_NOT_REACHED
    assert "not reached: best accuracy" in _last_err_line(capsys)
    assert json.loads((tmp_path / "r" / "train.json").read_text())["reached"] is False


def test_closed_pipe_exits_quietly_with_141() -> None:
    """`undercap devices | head`: no BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "undercap.cli", "devices", "--no-nvml"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader goes away before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE == 141, err
    assert err == ""


def test_numpy_that_torch_cannot_use_is_one_line(monkeypatch, capsys) -> None:
    """torch < 2.3 (JetPack's 2.0/2.1) with numpy 2: one line naming the fix, before any
    loading (instead of 'Numpy is not available' from inside a loader)."""
    import torch

    import undercap.data as data

    def broken(_: np.ndarray) -> torch.Tensor:
        raise RuntimeError("Numpy is not available")

    data.check_numpy_bridge.cache_clear()
    monkeypatch.setattr(data.torch, "from_numpy", broken)
    try:
        assert main([*TRAIN, "--target-accuracy", "0.5"]) == EXIT_USER_ERROR
    finally:
        data.check_numpy_bridge.cache_clear()
    line = _last_err_line(capsys)
    assert line.startswith(f"error: torch {torch.__version__} cannot use the installed numpy")
    assert "Numpy is not available" in line and "pip install 'numpy<2'" in line


def _digits_npz(folder: Path) -> None:
    from undercap.data import load_dataset

    s = load_dataset("digits", seed=0)
    x = np.concatenate([s.x_train.numpy(), s.x_test.numpy()])[:, 0]
    y = np.concatenate([s.y_train.numpy(), s.y_test.numpy()])
    folder.mkdir()
    np.savez(folder / "digits.npz", x=(x * 255 / x.max()).astype(np.uint8), y=y.astype(np.uint8))


def _server_selection(tmp_path: Path) -> Path:
    """A selection as `run` writes it on a server: its data lives in the server's folder."""
    sel = {
        "schema": "undercap.selection/1",
        "batch_size": 32,
        "freq_mhz": 768.0,
        "power_limit_w": 4.0,
        "peak_power_w": 3.3,
        "model": "small-cnn",
        "training": {
            "target_accuracy": 0.6,
            "max_samples": 1024,
            "eval_every_samples": 256,
            "data": {
                "dataset": "npz:digits.npz",
                "data_dir": "/srv/undercap/data",
                "input_shape": [1, 8, 8],
                "context": 64,
                "limit": None,
                "seed": 0,
                "split": None,
            },  # fmt: skip
        },
    }
    path = tmp_path / "selection.json"
    path.write_text(json.dumps(sel))
    return path


def test_from_selection_takes_data_flags_from_the_command_line(tmp_path, capsys) -> None:
    sel = _server_selection(tmp_path)
    base = ["train", "--from-selection", str(sel), "--no-progress", "--torch-device", "cpu"]
    assert main(base) == EXIT_USER_ERROR  # the server's folder is not on this board
    line = _last_err_line(capsys)
    assert "the selection's data folder /srv/undercap/data does not exist here" in line
    assert "--data-dir" in line
    here = tmp_path / "board-data"
    _digits_npz(here)
    out = tmp_path / "t.json"
    rc = main([*base, "--data-dir", str(here), "--limit", "600", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc in (0, EXIT_TARGET_NOT_REACHED)
    assert f"data: npz:digits.npz [600-sample subset, as 1x8x8] under {here.resolve()}" in err
    assert "(--data-dir, --limit from the command line)" in err
    result = json.loads(out.read_text())
    assert result["dataset"].startswith("npz:digits.npz")


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX signals")
def test_ctrl_c_is_130(tmp_path) -> None:
    """SIGINT in the middle of training: 130 and the one `error: interrupted` line."""
    import signal
    import time

    ckpt = tmp_path / "ckpt"
    argv = [*TRAIN, "--target-accuracy", "0.999", "--max-samples", "10000000",
            "--checkpoint-dir", str(ckpt), "--checkpoint-every-samples", "64"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "undercap.cli", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        # a background `make test &` hands its children SIGINT ignored, and Python then
        # keeps it ignored (the user's Ctrl-C never reaches a background job either):
        # the child starts with the default, as from a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    t0 = time.monotonic()
    while not (ckpt / "checkpoint.pt").exists() and time.monotonic() - t0 < 60:  # training
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "error: interrupted (device settings were restored)"


@pytest.mark.parametrize(
    ("torch_v", "numpy_v", "clash"),
    [
        ("2.1.0", "2.2.6", True),
        ("2.0.0a0+ec3941ad.nv23.02", "2.0.0", True),  # a JetPack 5 wheel's version
        ("2.0.1+cu117", "1.24.4", False),
        ("2.3.0", "2.2.6", False),
        ("2.13.0+cpu", "2.3.1", False),
        (None, "2.2.6", False),
    ],
)
def test_torch_numpy_clash_read_from_metadata(torch_v, numpy_v, clash) -> None:
    from undercap.cli.preflight import torch_numpy_mismatch

    line = torch_numpy_mismatch(torch_v, numpy_v)
    assert bool(line) == clash
    if clash:
        assert f"torch {torch_v} cannot use the installed numpy {numpy_v}" in line
        assert line.endswith("pip install 'numpy<2'")


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_numpy_clash_is_one_line_before_torch_is_imported(tmp_path: Path) -> None:
    """JetPack 6 as pip resolves it (torch 2.1 + numpy 2): importing torch would print
    numpy's 30-line warning, so the check reads package metadata and stops first."""
    code = (
        "import sys, importlib.metadata as md\n"
        "real = md.version\n"
        "md.version = lambda n: {'torch': '2.1.0', 'numpy': '2.2.6'}.get(n) or real(n)\n"
        "from undercap.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "assert 'torch' not in sys.modules, 'torch was imported before the check'\n"
        "sys.exit(rc)\n"
    )
    argv = [a for a in TRAIN if a != "--no-progress"] + ["--target-accuracy", "0.5"]
    proc = run_captured([sys.executable, "-c", code, *argv], cwd=tmp_path)  # capture_output: 3.7+
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: torch 2.1.0 cannot use the installed numpy 2.2.6 (it was built against "
        "numpy 1.x); torch builds before 2.3 need numpy 1.x: pip install 'numpy<2'"
    ]
