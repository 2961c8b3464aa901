"""`undercap pretrain / estimate / plot-efficiency`: end to end, resume after SIGKILL,
parallel workers, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import run_files

from undercap.artifacts import load_efficiency
from undercap.cli import main

REPO = Path(__file__).resolve().parents[1]
SMALL = [
    "--model",
    "small-cnn",
    "--dataset",
    "digits",
    "--limit",
    "600",
    "--torch-device",
    "cpu",
    "--no-progress",
    "--eval-every",
    "64",
]


def _estimate_args(out: Path, *extra: str, target: str = "0.8") -> list[str]:
    return [
        "estimate",
        *SMALL,
        "--batch-sizes",
        "8,32",
        "--seeds",
        "2",
        "--target-accuracy",
        target,
        "--max-samples",
        "2000",
        "-o",
        str(out),
        *extra,
    ]


def test_estimate_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eff.json"
    assert main(_estimate_args(out)) == 0
    text = capsys.readouterr().out
    assert "target accuracy 0.8000 [absolute]" in text and "wrote" in text
    eff = load_efficiency(out)
    assert eff.relative[32] == 1.0 and len(eff.samples_to_target[8]) == 2
    assert "b8-seed1.json" in run_files(tmp_path / "eff.json.runs")
    png = tmp_path / "eff.png"
    assert main(["plot-efficiency", str(out), "-o", str(png)]) == 0
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_killed_estimate_resumes_without_losing_finished_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eff.json"
    args = [
        "estimate",
        *SMALL,
        "--batch-sizes",
        "8,16,32",
        "--seeds",
        "2",
        "--target-accuracy",
        "0.85",
        "--max-samples",
        "3000",
        "-o",
        str(out),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "undercap.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    runs = tmp_path / "eff.json.runs"
    deadline = time.monotonic() + 120
    try:
        while not run_files(runs):
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no run finished within 120 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = sorted(run_files(runs).values())
    assert 1 <= len(done) < 6, f"kill came too late: {len(done)} runs already finished"
    assert not out.exists()
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in done}
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"reused {len(done)} finished run(s)" in err and f"ran {6 - len(done)}" in err
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in done} == before
    eff = load_efficiency(out)
    assert sorted(eff.samples_to_target) == [8, 16, 32]
    assert all(len(v) == 2 for v in eff.samples_to_target.values())
    assert len(run_files(runs)) == 6
    assert eff.extra["cost"]["reused_runs"] == len(done) and eff.extra["cost"]["runs"] == 6


def test_pretrain_then_parallel_estimate_matches_serial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = tmp_path / "w.pt"
    assert (
        main(
            [
                "pretrain",
                *SMALL[:-2],
                "--max-samples",
                "640",
                "--batch-size",
                "32",
                "-o",
                str(weights),
            ]
        )
        == 0
    )
    assert "final test accuracy" in capsys.readouterr().out
    blob = torch.load(weights, weights_only=True)
    meta = blob["meta"]
    assert meta["dataset"] == "digits" and meta["input_shape"] == [1, 8, 8]
    assert meta["num_classes"] == 10 and 0.0 < meta["accuracy"] <= 1.0
    serial, parallel = tmp_path / "s.json", tmp_path / "p.json"
    assert main(_estimate_args(serial, "--pretrained", str(weights), target="0.93")) == 0
    assert (
        main(_estimate_args(parallel, "--pretrained", str(weights), "--jobs", "2", target="0.93"))
        == 0
    )
    s, p = load_efficiency(serial), load_efficiency(parallel)
    assert s.extra["init"]["init"] == "pretrained"
    assert s.extra["config"]["pretrained_sha256"] == p.extra["config"]["pretrained_sha256"]
    assert p.extra["config"]["jobs"] == 2
    # same seeds, same weights: worker processes give the same N(b) as in-process runs
    assert p.samples_to_target == s.samples_to_target
    assert p.extra["curves"] == s.extra["curves"]
    # it did fine-tune: a run needed training past the first grid point (a sparse curve
    # keeps whole evaluations only, so its length says less)
    assert max(s.samples_to_target[8]) > 64
    # head seeds: one per seed, the same for every b, never the pre-training seed (0)
    runs = run_files(tmp_path / "s.json.runs")
    seeds = {n: json.loads(f.read_text())["init"]["init_seed"] for n, f in runs.items()}
    assert seeds["b8-seed0.json"] == seeds["b32-seed0.json"] != seeds["b8-seed1.json"]
    assert 0 not in seeds.values()


@pytest.mark.parametrize(
    "bad",
    [
        ["--batch-sizes", "0"],
        ["--target-accuracy", "1.5"],
        ["--target-accuracy", "0.9", "--target-fraction", "0.9"],
        ["--seeds", "1,1"],
        ["--jobs", "0"],
    ],
)
def test_bad_arguments_exit_2(bad: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        main(["estimate", "--model", "small-cnn", *bad, "-o", str(tmp_path / "e.json")])
    assert e.value.code == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["estimate", "--model", "nonsense", "-o", "{t}/e.json"], "unknown model"),
        (
            ["estimate", "--model", "small-cnn", "--max-samples", "64", "-o", "{t}/e.json"],
            "below the largest batch size 128",
        ),
        (
            ["estimate", "--model", "small-cnn", "--pretrained", "{t}/none.pt", "-o", "{t}/e.json"],
            "does not exist",
        ),
        (
            [
                "estimate",
                "--model",
                "small-cnn",
                "--dataset",
                "npz:missing.npz",
                "--data-dir",
                "{t}",
                "--no-progress",
                "-o",
                "{t}/e.json",
            ],
            "missing.npz",
        ),
        (["plot-efficiency", "{t}/none.json", "-o", "{t}/e.png"], "does not exist"),
        (
            [
                "pretrain",
                "--model",
                "small-cnn",
                "--dataset",
                "npz:missing.npz",
                "--data-dir",
                "{t}",
                "-o",
                "{t}/w.pt",
            ],
            "missing.npz",
        ),
    ],
)
def test_user_errors_are_one_line_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.replace("{t}", str(tmp_path)) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_other_config_in_same_work_dir_runs_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eff.json"
    args = [
        "estimate",
        *SMALL,
        "--batch-sizes",
        "16",
        "--seeds",
        "1",
        "--target-accuracy",
        "0.5",
        "--max-samples",
        "512",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    assert main([*args, "--lr", "0.003"]) == 0
    assert len(run_files(tmp_path / "eff.json.runs")) == 1  # named alike, keyed apart
    assert len(list((tmp_path / "eff.json.runs").glob("estimate-run/*/key.json"))) == 2
    capsys.readouterr()
    assert main([*args, "--lr", "0.003"]) == 0
    assert "reused 1 finished run(s)" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")
def test_cuda_without_gpu_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "estimate",
                "--model",
                "small-cnn",
                "--torch-device",
                "cuda",
                "-o",
                str(tmp_path / "e.json"),
            ]
        )
        == 2
    )
    assert "no CUDA GPU" in capsys.readouterr().err


def test_unreachable_target_stops_early_and_says_how_close(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target no run can reach within the budget: one seed per batch size shows it
    (it ends far below), the other seeds are skipped, and the one error line gives the
    best accuracy each batch size reached and where the finished runs are."""
    work = tmp_path / "work"
    args = _estimate_args(tmp_path / "e.json", "--work-dir", str(work), target="0.999")
    args[args.index("--seeds") + 1] = "3"
    args[args.index("--max-samples") + 1] = "256"
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: no batch size reached the target accuracy 0.9990"), err
    assert "best accuracy reached: b=8 0." in err and ", b=32 0." in err, err
    assert f"finished runs are kept in {work}" in err, err
    # seed 0 of each batch size ran out its budget far below 0.999; seeds 1, 2 skipped
    assert sorted(run_files(work)) == ["b32-seed0.json", "b8-seed0.json"]
