"""`undercap train`: SIGKILL + --resume, SIGTERM restores clocks, --from-selection."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional

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


def undercap(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "undercap.cli", *args],
        cwd=REPO,
        env={**ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )


def wait_for(cond, timeout_s: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# The killed run dies right after the step that reaches KILL_AT samples (the loop's test
# hook): checkpoints come every 32 samples and after every evaluation (every 64), so the
# last one is at 384 and the step to 400 is lost and redone; the target comes at ~900.
KILL_AT = 400


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    """SIGKILL mid-run (at a chosen step, whatever the machine's speed), then --resume:
    the result equals the uninterrupted run's, by the rule of resume_match.py: bit for
    bit on the CPU or with --deterministic, else within the run-to-run spread. Both
    runs are subprocesses with the same environment (one torch thread each), so on
    the CPU their sums add in the same order."""
    from resume_match import assert_resumed_matches, exact_expected

    from undercap.train.checkpoint import load_checkpoint
    from undercap.train.loop.repro import KILL_AFTER_SAMPLES_ENV

    ck = tmp_path / "ck"
    full = undercap(*RUN, "-o", str(tmp_path / "full.json"))  # meanwhile, uninterrupted
    killed = undercap(
        *RUN, "--checkpoint-dir", str(ck), "--checkpoint-every-samples", "32",
        env={KILL_AFTER_SAMPLES_ENV: str(KILL_AT)},
    )  # fmt: skip
    _, err = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, f"the run ended before it was killed: {err}"
    at_kill = load_checkpoint(ck)["trainer"]["samples"]
    assert 0 < at_kill < KILL_AT  # some work after the last checkpoint was lost

    resumed = undercap(
        *RUN, "--checkpoint-dir", str(ck), "--resume", "-o", str(tmp_path / "r.json")
    )
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    _, full_err = full.communicate(timeout=300)
    assert full.returncode == 0, full_err
    r = load_train_result(tmp_path / "r.json")
    f = load_train_result(tmp_path / "full.json")
    assert f.reached and at_kill < f.samples_to_target
    assert r.resumed_from == at_kill
    exact = exact_expected(r.config["torch_device"], r.config["deterministic"])
    n_eval, again = r.config["n_test"], None
    if not exact:  # the run-to-run spread: a second uninterrupted run
        second = undercap(*RUN, "-o", str(tmp_path / "again.json"))
        _, second_err = second.communicate(timeout=300)
        assert second.returncode == 0, second_err
        again = load_train_result(tmp_path / "again.json")
    assert_resumed_matches(r, f, exact=exact, n_eval=n_eval, target=f.target_accuracy, again=again)
    # device-side accounts continue from the checkpoint: nothing lost, nothing doubled
    if r.samples_to_target == f.samples_to_target:  # always so where exact
        assert r.time_to_accuracy_s == pytest.approx(f.time_to_accuracy_s, rel=1e-6)
        assert r.energy_j == pytest.approx(f.energy_j, rel=0.02)  # sensor noise differs
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
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
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


@pytest.mark.parametrize("given", [None, "sim:jetson-nano"])
def test_from_selection_trains_on_the_selections_device(tmp_path, capsys, given):
    """No --device: the board the selection was made for (a TX2 NX's selection trained
    on the default Nano would run at a clock the Nano lacks), said on stderr; --device
    wins."""
    sel = selection(tmp_path, device="sim:jetson-tx2nx", freq_mhz=1134.75, power_limit_w=7.0)
    out = tmp_path / "r.json"
    device = ["--device", given] if given else []
    assert (
        main(["train", "--from-selection", str(sel), *device, *QUICK.split(), "-o", str(out)]) == 0
    )
    err = capsys.readouterr().err
    assert load_train_result(out).device["name"] == (given or "sim:jetson-tx2nx")
    assert ("device: sim:jetson-tx2nx (the selection's" in err) == (given is None)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "resnet18"], "selected for model 'small-cnn'"),
        (["--checkpoint-dir", "NOPE", "--resume"], "no checkpoint"),
        (["--eval-every", "4096"], "coarser than the sample budget 3000"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, extra, message):
    extra = [str(tmp_path / "nope") if a == "NOPE" else a for a in extra]
    rc = main(["train", "--from-selection", str(selection(tmp_path)), *QUICK.split(), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error:") and message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", [[], ["--deterministic"]], ids=["default", "deterministic"])
def test_deterministic_reaches_the_trainer_and_the_result(tmp_path, monkeypatch, flag):
    """`train --deterministic`: torch trains with deterministic algorithms, cuDNN's
    deterministic kernels and no benchmarking (seen from inside the loop), cuBLAS gets
    its fixed workspace, the result says so, and torch's flags are as they were after."""
    import torch

    from undercap.train.loop import Trainer
    from undercap.train.loop.repro import CUBLAS_WORKSPACE_CONFIG

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "unset")  # so that teardown puts back
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")  # what was there (or nothing)
    seen = []
    step = Trainer.step

    def spying_step(self):
        cudnn = torch.backends.cudnn
        seen.append(
            (torch.are_deterministic_algorithms_enabled(), cudnn.deterministic, cudnn.benchmark)
        )
        step(self)

    monkeypatch.setattr(Trainer, "step", spying_step)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic)
    out = tmp_path / "r.json"
    args = ["train", "--device", "sim:jetson-nano", "--model", "small-cnn", *QUICK.split(),
            "--batch-size", "32", "--max-samples", "256", "--eval-every", "128",
            "--target-accuracy", "0.3", *flag]  # fmt: skip
    assert main([*args, "-o", str(out)]) == 0
    on = bool(flag)
    assert seen and set(seen) == ({(True, True, False)} if on else {before + (False,)})
    assert load_train_result(out).config["deterministic"] is on
    assert (os.environ.get("CUBLAS_WORKSPACE_CONFIG") == CUBLAS_WORKSPACE_CONFIG) is on
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic) == (
        before
    )


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_run_passes_deterministic_to_device_training() -> None:
    """`run --deterministic` (and `compare`'s, same options): device training gets it."""
    from undercap.cli import build_parser
    from undercap.cli.recipes import _setup

    base = ["run", "--device", "sim:jetson-nano", "--model", "small-cnn", "--proxy", "digits",
            "--target", "digits", "--power-limit", "4", "--target-accuracy", "0.9",
            "-o", "out"]  # fmt: skip
    parser = build_parser()

    def spec(args):  # the plan of a device run of this setup
        return _setup(args).plan("small-cnn", 32, target_accuracy=0.9, seed=0)

    assert spec(parser.parse_args(base)).deterministic is False
    assert spec(parser.parse_args([*base, "--deterministic"])).deterministic is True


def test_deterministic_op_missing_is_one_error_line() -> None:
    """An op with no deterministic kernel (torch raises) is an UndercapError (exit 2,
    one line) that says to drop --deterministic; other errors pass through, and
    torch's flags are put back either way."""
    import torch

    from undercap.errors import UndercapError
    from undercap.train.loop.repro import deterministic_torch

    before = torch.are_deterministic_algorithms_enabled()
    msg = "adaptive_avg_pool3d_backward_cuda does not have a deterministic implementation"
    with pytest.raises(UndercapError, match="drop --deterministic") as e, deterministic_torch(True):
        raise RuntimeError(msg + ", but you set 'torch.use_deterministic_algorithms(True)'")
    assert msg in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(RuntimeError, match="other"), deterministic_torch(True):
        raise RuntimeError("other")
    assert torch.are_deterministic_algorithms_enabled() is before


def test_a_selection_made_with_deterministic_trains_deterministic(tmp_path):
    """`run --deterministic` records it in the selection's training block, and `train
    --from-selection` takes it from there (as it takes the seed or the budgets)."""
    from undercap.artifacts.selection import Selection, load_selection, save_selection
    from undercap.cli import build_parser
    from undercap.cli.train import _resolve

    def resolved(training: dict, *flags: str) -> bool:
        sel = Selection("ours", 32, 900.0, 1e-4, 3.0, 3.5, "small-cnn", "sim", True)
        path = save_selection(tmp_path / "sel.json", dataclasses.replace(sel, training=training))
        base = ["train", "--from-selection", str(path), "--target-accuracy", "0.9"]
        args = build_parser().parse_args([*base, *flags])
        return _resolve(args, load_selection(path)).deterministic

    assert resolved({"deterministic": True}) is True
    assert resolved({}) is False and resolved({}, "--deterministic") is True
