"""Artifacts written by undercap 0.1 (before the redesign) still load and still drive
the commands that read them (tests/fixtures/v0.1 is the output of 0.1's `make demo`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from undercap.artifacts import load_efficiency, load_json, load_profile
from undercap.artifacts.comparison import Comparison
from undercap.artifacts.selection import SELECTION_SCHEMA, load_selection
from undercap.artifacts.train_result import load_train_result
from undercap.cli import main

V01 = Path(__file__).parent / "fixtures" / "v0.1"


def test_v01_artifacts_load() -> None:
    profile = load_profile(V01 / "profile.json")
    assert profile.model == "small-cnn" and profile.mode == "efficient" and profile.rows
    eff = load_efficiency(V01 / "efficiency.json")
    assert eff.relative[max(eff.relative)] == 1.0
    result = load_train_result(V01 / "train.json")
    assert result.reached and result.batch_size == 128
    comparison = Comparison.from_dict(load_json(V01 / "comparison.json"))
    assert len(comparison.runs) == 60 and comparison.simulated


@pytest.mark.parametrize("name", ["selection-run.json", "selection-select.json"])
def test_v01_selections_load_with_their_lr_scaling(name: str) -> None:
    sel = load_selection(V01 / name)
    assert (sel.batch_size, sel.freq_mhz, sel.power_limit_w) == (128, 768.0, 3.5)
    assert sel.model == "small-cnn" and sel.simulated and 3.4 < sel.peak_power_w <= 3.5
    # 0.1 files carry no training block: it comes from the efficiency artifact beside them
    assert sel.training == {"max_batch_size": 256, "base_lr": 0.001}
    assert sel.to_dict()["schema"] == SELECTION_SCHEMA


def test_v01_run_selection_drives_train(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "train.json"
    args = ["train", "--from-selection", str(V01 / "selection-run.json"), "--dataset", "digits",
            "--limit", "600", "--target-accuracy", "0.4", "--max-samples", "1024",
            "--eval-every", "256", "--torch-device", "cpu", "--no-progress", "-o", str(out)]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["batch_size"] == 128 and result["freq_mhz_start"] == 768.0
    assert result["power_limit_w"] == 3.5 and result["config"]["max_batch_size"] == 256
