"""`undercap train`: SIGKILL + --resume, SIGTERM restores clocks, --from-selection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from undercap.artifacts.train_result import load_train_result
from undercap.cli import main

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
# A run long enough to be killed in the middle: b=16 to 97% on 600 digits.
RUN = [
    "train", "--device", "sim:jetson-nano", "--model", "small-cnn", "--dataset", "digits",
    "--limit", "600", "--batch-size", "16", "--freq-mhz", "614.4",
    "--target-accuracy", "0.97", "--max-samples", "20000", "--eval-every", "64",
    "--seed", "3", "--no-progress",
]  # fmt: skip


def undercap(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "undercap.cli", *args],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(cond, timeout_s: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    from undercap.data import load_dataset
    from undercap.devices import open_device
    from undercap.train import train_on_device
    from undercap.train.checkpoint import load_checkpoint

    ck = tmp_path / "ck"
    killed = undercap(*RUN, "--checkpoint-dir", str(ck), "--checkpoint-every-samples", "32")
    wait_for(lambda: (ck / "checkpoint.pt").exists() or killed.poll() is not None, 120, "ckpt")
    time.sleep(0.3)  # let it train past the checkpoint: that work is lost and redone
    killed.send_signal(signal.SIGKILL)
    _, err = killed.communicate()
    assert killed.returncode == -signal.SIGKILL, f"the run ended before it was killed: {err}"
    at_kill = load_checkpoint(ck)["trainer"]["samples"]

    resumed = undercap(
        *RUN, "--checkpoint-dir", str(ck), "--resume", "-o", str(tmp_path / "r.json")
    )
    # Meanwhile, the same run uninterrupted (in this process; same data, seed, settings).
    full = train_on_device(
        open_device("sim:jetson-nano", seed=3),
        "small-cnn",
        load_dataset("digits", input_shape=(1, 8, 8), limit=600),
        batch_size=16,
        freq_mhz=614.4,
        target_accuracy=0.97,
        max_samples=20000,
        eval_every_samples=64,
        seed=3,
        progress=False,
    )
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    r = load_train_result(tmp_path / "r.json")
    assert full.reached and 0 < at_kill < full.samples_to_target
    assert r.resumed_from == at_kill
    assert r.samples_to_target == full.samples_to_target
    # same evaluations, same accuracies; losses equal up to float reduction order
    # (the subprocess may use another number of torch threads)
    assert [(p["samples"], p["accuracy"]) for p in r.curve] == [
        (p["samples"], p["accuracy"]) for p in full.curve
    ]
    assert [p["loss"] for p in r.curve] == pytest.approx([p["loss"] for p in full.curve], rel=1e-4)
    assert r.steps == full.steps
    # device-side accounts continue from the checkpoint: nothing lost, nothing doubled
    assert r.time_to_accuracy_s == pytest.approx(full.time_to_accuracy_s, rel=1e-6)
    assert r.energy_j == pytest.approx(full.energy_j, rel=0.02)
    assert "resumed from a checkpoint" in out and "simulated" in out.lower()


def test_sigterm_restores_original_jetson_clocks(tmp_path):
    from fakes.sysfs import build_nano

    tree = build_nano(tmp_path / "nano")
    before = tree.settings()
    env = {k: v for k, v in ENV.items() if k != "UNDERCAP_STATE_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "undercap.cli", "train", "--device", "jetson",
         "--sysfs-root", str(tree.root), "--model", "small-cnn", "--dataset", "digits",
         "--limit", "300", "--batch-size", "8", "--freq-mhz", "614.4", "--power-limit", "10",
         "--target-accuracy", "1.0", "--max-samples", "100000000", "--eval-every", "1000000",
         "--torch-device", "cpu", "--no-progress"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(
        lambda: tree.read("min_freq") == "614400000" or proc.poll() is not None,
        120,
        "the clock lock",
    )
    time.sleep(0.5)  # training under way at the locked clock
    assert tree.read("max_freq") == "614400000" and tree.settings()["railgate_enable"] == "0"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "terminated (device settings were restored)" in err
    assert tree.settings() == before
    assert not list((tree.root / "var/lib/undercap").glob("state-*.json"))


def selection(tmp_path: Path, **over) -> Path:
    sel = {
        "batch_size": 32,
        "freq_mhz": 768.0,
        "power_limit_w": 4.0,
        "model": "small-cnn",
        "peak_power_w": 3.3,
    }
    sel.update(over)
    path = tmp_path / "select.json"
    path.write_text(json.dumps(sel))
    return path


QUICK = "--dataset digits --limit 400 --target-accuracy 0.8 --max-samples 3000 --no-progress"


def test_from_selection_sets_batch_frequency_limit_and_lr_scaling(tmp_path, capsys):
    out = tmp_path / "r.json"
    # the estimate the selection used: LR 2e-3 at its largest batch, 128
    (tmp_path / "eff.json").write_text(json.dumps({"config": {"b_max": 128, "base_lr": 2e-3}}))
    sel = selection(tmp_path, efficiency="eff.json")
    args = ["train", "--from-selection", str(sel), *QUICK.split(), "--eval-every", "256"]
    assert main([*args, "-o", str(out)]) == 0
    r = load_train_result(out)
    assert (r.batch_size, r.freq_mhz_start, r.power_limit_w) == (32, 768.0, 4.0)
    assert r.model == "small-cnn" and r.simulated
    assert r.lr == pytest.approx(2e-3 * (32 / 128) ** 0.5)
    text = capsys.readouterr().out
    assert "[simulated]" in text and "time to 80.0%" in text and "energy" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "resnet18"], "selected for model 'small-cnn'"),
        (["--checkpoint-dir", "NOPE", "--resume"], "no checkpoint"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, extra, message):
    extra = [str(tmp_path / "nope") if a == "NOPE" else a for a in extra]
    rc = main(["train", "--from-selection", str(selection(tmp_path)), *QUICK.split(), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error:") and message in err
    assert len(err.strip().splitlines()) == 1
