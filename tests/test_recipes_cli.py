"""`undercap run` and `undercap compare` from the command line."""

from __future__ import annotations

import json

import pytest

from undercap.cli import main
from undercap.cli.cap_args import power_limits

QUICK = [
    "--device", "sim:jetson-nano", "--model", "small-cnn", "--batch-sizes", "16,64",
    "--max-samples", "2000", "--eval-every", "128", "--torch-device", "cpu", "--no-progress",
]  # fmt: skip


def test_power_limits_arg():
    assert power_limits("5, 7.5,none") == [5.0, 7.5, None]
    for bad in ("5,5", "0", "-3", "five", ""):
        with pytest.raises(Exception):  # noqa: B017 - argparse.ArgumentTypeError or ValueError
            power_limits(bad)


def test_run_writes_the_results_folder(tmp_path, capsys):
    out = tmp_path / "res"
    args = ["run", *QUICK, "--proxy", "digits", "--proxy-limit", "300", "--proxy-split-seed",
            "1", "--target", "digits", "--target-limit", "600", "--power-limit", "3.5",
            "--target-accuracy", "0.7", "--estimate-seeds", "1", "-o", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "simulated device" in printed and "selected: batch size" in printed
    for name in ("profile.json", "efficiency.json", "selection.json", "train.json", "summary.md"):
        assert (out / name).is_file(), name
    import csv

    evals = list(csv.DictReader((out / "evals.csv").open()))  # one row per evaluation
    assert evals and float(evals[-1]["accuracy"]) >= 0.7 and float(evals[-1]["energy_j"]) > 0
    sel = json.loads((out / "selection.json").read_text())
    train = json.loads((out / "train.json").read_text())
    assert sel["schema"] == "undercap.selection/1"
    assert sel["peak_power_w"] <= 3.5 and sel["power_limit_w"] == 3.5
    assert train["batch_size"] == sel["batch_size"]
    assert train["freq_mhz_start"] == sel["freq_mhz"]
    assert train["reached"] and train["simulated"] and train["power_limit_w"] == 3.5
    profile = json.loads((out / "profile.json").read_text())
    assert profile["mode"] == "efficient" and profile["power_limit_w"] == 3.5
    # reusing the artifacts (no estimate, no profiling: same choice), pre-training first
    out2 = tmp_path / "res2"
    args2 = ["run", *QUICK, "--target", "digits", "--target-limit", "600", "--power-limit",
             "3.5", "--target-accuracy", "0.7", "--efficiency", str(out / "efficiency.json"),
             "--profile", str(out / "profile.json"), "--pretrain", "digits",
             "--pretrain-limit", "200", "--pretrain-samples", "256", "-o", str(out2)]  # fmt: skip
    assert main(args2) == 0
    sel2 = json.loads((out2 / "selection.json").read_text())
    assert (sel2["batch_size"], sel2["freq_mhz"]) == (sel["batch_size"], sel["freq_mhz"])
    err = capsys.readouterr().err
    assert "reusing r(b)" in err and "reusing profile" in err and "pre-trained small-cnn" in err
    train2 = json.loads((out2 / "train.json").read_text())
    assert (
        train2["config"]["pretrained_sha256"] and train2["config"]["init"]["init"] == "pretrained"
    )
    assert list((out2 / "cache" / "pretrained").glob("*/weights.pt"))
    # the selection a run wrote repeats that run: same data, weights, LR and budgets
    again = tmp_path / "again.json"
    capsys.readouterr()
    assert main(["train", "--from-selection", str(out2 / "selection.json"),
                 "--no-progress", "--torch-device", "cpu", "-o", str(again)]) == 0  # fmt: skip
    rerun = json.loads(again.read_text())
    for key in ("time_to_accuracy_s", "samples_to_target", "batch_size", "lr", "freq_mhz_start"):
        assert rerun[key] == train2[key], key
    assert rerun["config"]["pretrained_sha256"] == train2["config"]["pretrained_sha256"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--model", "vgg"], "unknown model"),
        (["--target", "nosuchformat"], "unknown dataset"),
        (["--power-limit", "0.5"], "lowest feasible power"),
        (["--efficiency", "/nonexistent.json"], "does not exist"),
        (["--pretrained", "/nonexistent.pt"], "does not exist"),
        (["--device", "sim:nope"], "unknown simulated device"),
    ],
)
def test_run_bad_input_exits_2(tmp_path, capsys, extra, needle):
    base = {"--model": "small-cnn", "--target": "digits", "--power-limit": "3.5",
            "--proxy": "digits", "--device": "sim:jetson-nano"}  # fmt: skip
    opts = dict(base)
    opts.update(dict(zip(extra[::2], extra[1::2])))
    argv = ["run", "--batch-sizes", "16", "--max-samples", "256", "--eval-every", "128",
            "--target-accuracy", "0.5", "--estimate-seeds", "1", "--no-progress",
            "--torch-device", "cpu", "-o", str(tmp_path / "o")]  # fmt: skip
    for k, v in opts.items():
        argv += [k, v]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]


def test_compare_argument_errors_exit_2(tmp_path, capsys):
    base = ["compare", "--model", "small-cnn", "--proxy", "digits", "--target", "digits",
            "-o", str(tmp_path / "o")]  # fmt: skip
    with pytest.raises(SystemExit) as e:  # argparse: both target kinds
        main([*base, "--power-limits", "3.5", "--target-accuracy", "0.5",
              "--target-fraction", "0.9"])  # fmt: skip
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:  # argparse: duplicate limits
        main([*base, "--power-limits", "3.5,3.5", "--target-accuracy", "0.5"])
    assert e.value.code == 2
    capsys.readouterr()
    argv = [*base, "--power-limits", "0.5,none", "--target-accuracy", "0.5", "--batch-sizes",
            "16", "--max-samples", "256", "--seeds", "1", "--no-progress"]  # fmt: skip
    assert main(argv) == 2  # infeasible cap: no frequency keeps the models under it
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and "raise the power limit" in err[-1]


@pytest.mark.parametrize(
    ("command", "flags", "what"),
    [
        ("run", ["--race"], "race on the target"),
        ("run", ["--no-race"], "race on the target"),
        ("run", ["--race-budget", "0.05"], "sized the removed race"),
        ("run", ["--online"], "own curve"),
        ("run", ["--gns-check"], "gradient-noise-scale"),
        ("run", ["--no-gns-check"], "gradient-noise-scale"),
        ("run", ["--gns-budget", "0.01"], "sized the removed"),
        ("run", ["--rule", "gns"], "ensemble rule"),
        ("run", ["--rule", "spread"], "no better than Algorithm 1"),
        ("train", ["--race"], "race on the target"),
        ("train", ["--online"], "own curve"),
    ],
)
def test_a_removed_option_is_one_line_saying_what_decides_now(capsys, command, flags, what):
    """The options 0.3.0 removed (measured not to help): one `error:` line, exit 2,
    naming what does the job now, before any work."""
    argv = [command, "--device", "sim:jetson-nano", "--model", "small-cnn", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "removed in undercap 0.3.0" in line[0] and what in line[0], err


def test_removed_keywords_of_the_library_are_one_error_too():
    from undercap.devices import open_device
    from undercap.errors import UndercapError
    from undercap.recipes.run import RunConfig
    from undercap.train.api import capped

    with open_device("sim:jetson-nano") as device:
        with pytest.raises(UndercapError, match="removed in undercap 0.3.0"):
            capped(device, batch_size=8, race=True)
        with pytest.raises(UndercapError, match="removed in undercap 0.3.0"):
            capped(device, batch_size=8, online=True)
        with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
            capped(device, batch_size=8, nope=1)
    with pytest.raises(UndercapError, match="--gns-check"):
        RunConfig("sim:jetson-nano", "small-cnn", None, None, 4.0, None, 0.9, gns_check=True)


def test_run_config_takes_the_cap_and_its_old_spelling_with_a_warning():
    """RunConfig holds the cap and nothing beside it; power_limit_w= is a deprecated
    spelling of it for one release."""
    from undercap.recipes.run import RunConfig
    from undercap.train.cap import FixedCap

    cfg = RunConfig("sim:jetson-nano", "small-cnn", None, None, 4.0, None, 0.9)
    assert cfg.cap == FixedCap(4.0) and not hasattr(cfg, "power_limit_w")
    with pytest.warns(DeprecationWarning, match="give cap="):
        old = RunConfig("sim:jetson-nano", "small-cnn", None, None, setup=None,
                        target_accuracy=0.9, cap=None, power_limit_w=3.5)  # fmt: skip
    assert old.cap == FixedCap(3.5)
