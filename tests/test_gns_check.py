"""`undercap run`'s cross-check of r(b) (recipes/gns_check.py): the probe's budget,
the rule's choice in the selection, the summary block, and one real run."""

from __future__ import annotations

import json

import pytest
from select_helpers import figure1_profile, make_efficiency

from undercap import defaults
from undercap.cli import main
from undercap.recipes.gns_check import GnsCheck, apply_check, decide, plan
from undercap.recipes.selection import build_selection
from undercap.report.text import gns_check_lines


def _eff(rel: dict[int, float], n_max: int = 10_000):  # type: ignore[no-untyped-def]
    eff = make_efficiency(rel, n_max=n_max, model="small-cnn")
    eff.extra["samples_to_target_mean"] = {str(b): r * n_max for b, r in rel.items()}
    eff.extra["reference_batch_size"] = max(rel)
    return eff


def test_plan_fits_the_probe_in_the_budget_or_skips() -> None:
    profile = figure1_profile(model="small-cnn")
    eff = _eff({8: 0.4, 16: 0.6, 32: 0.8, 64: 1.0}, n_max=1_000_000)
    row, steps, predicted, why = plan(profile, eff, None, n_train=100_000, budget=0.01)
    assert row.batch_size == 8 and why is None and predicted > 0
    step_s = row.time_per_sample_s * row.batch_size * defaults.GNS_PROBE_K
    assert steps == min(defaults.GNS_MAX_STEPS, int(0.01 * predicted // step_s))
    assert steps * step_s <= 0.01 * predicted
    # a short training: not even the smallest probe fits in 1%
    short = _eff({8: 0.4, 16: 0.6, 32: 0.8, 64: 1.0}, n_max=50)
    _, steps, _, why = plan(profile, short, None, n_train=100_000, budget=0.01)
    assert steps == 0 and "exceeds 1%" in why
    # too little data for two probe steps
    _, steps, _, why = plan(profile, eff, None, n_train=100, budget=0.01)
    assert steps == 0 and "too few training samples" in why


def test_the_rule_choice_replaces_algorithm1s_in_the_selection() -> None:
    profile = figure1_profile(model="small-cnn")
    eff = _eff({8: 0.4, 16: 0.6, 32: 0.8, 64: 1.0})
    sel = build_selection(profile, eff, None)
    choices = decide(profile, eff, None, None, None)
    assert choices["paper"] == [sel.batch_size, sel.freq_mhz] and "gns" not in choices
    other = next(c for c in sel.extra["candidates"] if c["batch_size"] != sel.batch_size)
    check = GnsCheck(
        rule="spread",
        skipped="test",
        choices={**choices, "spread": [other["batch_size"], other["freq_mhz"]]},
    )
    out = apply_check(sel, check)
    assert (out.batch_size, out.freq_mhz) == (other["batch_size"], other["freq_mhz"])
    assert out.extra["gns_check"]["changed"] and out.extra["algorithm1_choice"] == [
        sel.batch_size,
        sel.freq_mhz,
    ]
    assert out.extra["predicted_time_s"] == pytest.approx(
        other["time_per_sample_s"] * other["relative_samples"] * 10_000
    )
    same = apply_check(sel, GnsCheck(rule="paper", skipped="off", choices=choices))
    assert (same.batch_size, same.freq_mhz) == (sel.batch_size, sel.freq_mhz)
    assert not same.extra["gns_check"]["changed"]
    text = "\n".join(gns_check_lines(out.extra["gns_check"]))
    assert "skipped: test" in text and "changed the choice: yes" in text


def test_run_shows_the_check_beside_r(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "res"
    args = ["run", "--device", "sim:jetson-nano", "--model", "small-cnn", "--batch-sizes", "8,16,32",
            "--max-samples", "4000", "--eval-every", "64", "--torch-device", "cpu", "--no-progress",
            "--proxy", "digits", "--proxy-limit", "600", "--proxy-split-seed", "1", "--target",
            "digits", "--target-limit", "1000", "--power-limit", "3.5", "--target-accuracy", "0.9",
            "--estimate-seeds", "2", "--gns-budget", "1", "--rule", "gns", "-o", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "r(b) cross-check, gradient noise scale" in printed and "B_simple" in printed
    sel = json.loads((out / "selection.json").read_text())
    check = sel["gns_check"]
    assert check["rule"] == "gns" and check["steps"] >= defaults.GNS_MIN_STEPS
    assert check["target"]["b_simple"] is None or check["target"]["b_simple"] > 0
    assert check["proxy"] is not None and set(check["choices"]) == {"paper", "spread", "gns"}
    assert [sel["batch_size"], sel["freq_mhz"]] == check["trained"]
    assert 0 < check["probe_time_s"] <= check["predicted_train_time_s"]  # within the 100% budget
    train = json.loads((out / "train.json").read_text())
    assert train["batch_size"] == sel["batch_size"]
