"""`--proxy-slice` on `estimate` and `run`: r(b) from a slice of the target's own
training split, its target the device run's capped at a fraction of what the slice
reaches, recorded in the efficiency artifact and the selection, cached apart from the
whole dataset, refused in one line when too small."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
from test_estimate_cli import SMALL

from undercap import defaults
from undercap.artifacts import load_efficiency
from undercap.artifacts.efficiency import Efficiency
from undercap.cli import main
from undercap.cli.common import share
from undercap.data.spec import DataSpec, load_splits
from undercap.errors import UndercapError
from undercap.estimate import EstimateConfig
from undercap.estimate.aggregate import _check_slice

HAS_RAY = importlib.util.find_spec("ray") is not None
# six runs of a second or two on a 50% slice of 600 training digits (--limit 600)
EST = [*SMALL, "--batch-sizes", "8,16,32", "--seeds", "2", "--max-samples", "3000"]
RUN = [
    "run",
    "--device",
    "sim:jetson-nano",
    "--model",
    "small-cnn",
    "--target",
    "digits",
    "--target-limit",
    "600",
    "--batch-sizes",
    "8..64",
    "--target-accuracy",
    "0.85",
    "--max-samples",
    "4000",
    "--eval-every",
    "64",
    "--estimate-seeds",
    "2",
    "--torch-device",
    "cpu",
    "--no-progress",
    "--power-limit",
    "3.5",
]


def _estimate(out: Path, *extra: str) -> Efficiency:
    assert (
        main(["estimate", *EST, *extra, "--work-dir", str(out.parent / "runs"), "-o", str(out)])
        == 0
    )
    return load_efficiency(out)


def _cached(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "runs").glob("estimate-run/*/value.json"))


@pytest.mark.parametrize(
    ("text", "value"), [("10%", 0.1), ("0.1", 0.1), ("100%", 1.0), ("2.5%", 0.025)]
)
def test_a_share_is_a_percentage_or_a_fraction(text: str, value: float) -> None:
    assert share(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["0", "0%", "150%", "1.5", "-5%", "ten", "%"])
def test_a_share_outside_0_1_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        share(text)


@pytest.mark.parametrize("text", ["150%", "1.5"])
def test_a_share_over_100_percent_says_so(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="at most 100%"):
        share(text)


def test_estimate_on_a_slice_records_it_and_caps_the_target(tmp_path: Path) -> None:
    eff = _estimate(tmp_path / "slice.json", "--proxy-slice", "50%", "--target-accuracy", "0.99")
    s = eff.extra["slice"]
    assert (s["of"], s["fraction"], s["percent"], s["seed"], s["split_seed"]) == (
        "digits",
        0.5,
        "50%",
        0,
        0,
    )
    n = s["train_items"] + s["held_out_items"]  # half of 600 training items, class by class
    assert abs(n - 300) <= 10 and abs(s["held_out_items"] - 0.2 * n) <= 10
    t = eff.extra["target"]
    assert t["mode"] == "capped" and t["given_accuracy"] == 0.99
    assert t["fraction"] == defaults.SLICE_TARGET_FRACTION
    # 0.99 is out of a 240-item slice's reach: its target is 0.95 of what b_max reaches
    assert eff.target_accuracy == pytest.approx(min(0.99, t["fraction"] * t["reference_accuracy"]))
    assert eff.target_accuracy < 0.99 and s["target"] == t
    assert eff.dataset == "digits [50% slice, slice seed 0]"
    cfg = eff.extra["config"]  # the runs' cache key holds the slice
    assert (cfg["dataset"], cfg["slice_fraction"], cfg["slice_seed"]) == ("digits", 0.5, 0)


def test_a_reachable_target_is_kept(tmp_path: Path) -> None:
    eff = _estimate(tmp_path / "slice.json", "--proxy-slice", "50%", "--target-accuracy", "0.5")
    assert eff.target_accuracy == 0.5 and eff.extra["target"]["mode"] == "capped"


def test_slices_are_cached_apart_and_reproduced(tmp_path: Path) -> None:
    a = _estimate(tmp_path / "a.json", "--proxy-slice", "50%", "--target-accuracy", "0.8")
    assert len(_cached(tmp_path)) == 6
    b = _estimate(tmp_path / "b.json", "--proxy-slice", "50%", "--target-accuracy", "0.8")
    assert b.extra["cost"]["reused_runs"] == 6 and b.samples_to_target == a.samples_to_target
    other = _estimate(tmp_path / "c.json", "--proxy-slice", "50%", "--proxy-slice-seed", "1",
                      "--target-accuracy", "0.8")  # fmt: skip
    whole = _estimate(tmp_path / "d.json", "--target-accuracy", "0.8")
    assert other.extra["cost"]["reused_runs"] == 0 and whole.extra["cost"]["reused_runs"] == 0
    assert len(_cached(tmp_path)) == 18  # three datasets' runs
    fresh = tmp_path / "fresh" / "a.json"
    again = _estimate(fresh, "--proxy-slice", "50%", "--target-accuracy", "0.8")
    assert (
        again.samples_to_target == a.samples_to_target and again.extra["slice"] == a.extra["slice"]
    )


def test_a_slice_too_small_for_its_classes_is_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "e.json"
    assert main(["estimate", *EST, "--proxy-slice", "1%", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: a 1% slice of digits"), err
    assert "the smallest that has them is" in err[0]
    assert not out.exists() and not (tmp_path / "e.json.runs").exists()


def test_run_refuses_a_small_slice_before_the_device(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    assert main([*RUN, "--proxy-slice", "1%", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a 1% slice of digits" in err[0], err
    assert not any(out.rglob("*.json"))  # not profiled, nothing written


def test_a_slice_whose_r_b_holds_b_max_alone_is_refused() -> None:
    cfg = EstimateConfig(model="small-cnn", data=DataSpec("digits", slice_fraction=0.05),
                         batch_sizes=(8, 16, 32), target_accuracy=0.9)  # fmt: skip
    sliced = {"of": "digits", "fraction": 0.05, "percent": "5%", "train_items": 72}
    eff = Efficiency(
        "small-cnn", "digits", 0.6, {8: (None,), 16: (None,), 32: (640,)}, {32: 1.0}, {}
    )
    with pytest.raises(
        UndercapError,
        match=r"only batch size 32 .* try a larger slice \(--proxy-slice 10% or more\)",
    ):
        _check_slice(cfg, eff, sliced)
    whole = {**sliced, "fraction": 1.0, "percent": "100%"}
    with pytest.raises(UndercapError, match="try a larger --max-samples"):
        _check_slice(cfg, eff, whole)
    two = Efficiency("small-cnn", "digits", 0.6, {16: (900,), 32: (640,)}, {16: 1.4, 32: 1.0}, {})
    _check_slice(cfg, two, sliced)  # two points: an r(b)


def test_run_from_a_slice_alone_and_beside_a_proxy(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    alone = tmp_path / "alone"
    assert (
        main([*RUN, *cache, "--proxy-slice", "50%", "--target-split-seed", "1", "-o", str(alone)])
        == 0
    )
    summary = (alone / "summary.md").read_text()
    assert "r(b) from: digits [50% slice, slice seed 0, 600-sample subset, split seed 1]" in summary
    assert "the lower of 0.8500 and 0.95 x" in summary and "simulated" in summary
    sel = json.loads((alone / "selection.json").read_text())
    (s,) = sel["proxy_slices"]
    # the slice is of the target's own training split: its split seed and subset
    assert (s["of"], s["percent"], s["split_seed"], s["limit"]) == ("digits", "50%", 1, 600)
    assert s["target"]["given_accuracy"] == 0.85
    train = json.loads((alone / "train.json").read_text())
    assert train["samples_to_target"] is not None
    beside = tmp_path / "beside"
    assert main([*RUN, *cache, "--proxy-slice", "50%", "--target-split-seed", "1", "--proxy", "digits",
                 "--proxy-limit", "300", "-o", str(beside)]) == 0  # fmt: skip
    sel = json.loads((beside / "selection.json").read_text())
    assert sel["method"] == "ensemble" and len(sel["proxy_slices"]) == 1
    names = [p["dataset"] for p in sel["ensemble"]["proxies"]]
    assert names == ["digits", "digits [50% slice, slice seed 0]"]
    assert "reused" in capsys.readouterr().err  # the slice's runs, from the first run's cache


def test_the_slice_never_holds_the_targets_test_items() -> None:
    target = DataSpec("digits", limit=600, seed=1)
    whole = load_splits(target)
    part = load_splits(DataSpec("digits", limit=600, seed=1, slice_fraction=0.5))

    def rows(xs):  # type: ignore[no-untyped-def]
        return {tuple(x.flatten().tolist()) for x in xs}

    train, test_only = rows(whole.x_train), rows(whole.x_test) - rows(whole.x_train)
    sliced = rows(part.x_train) | rows(part.x_test)
    assert sliced <= train and not sliced & test_only


def test_slice_and_efficiency_together_are_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert (
        main([*RUN, "--proxy-slice", "10%", "--efficiency", "e.json", "-o", str(tmp_path / "r")])
        == 2
    )
    assert "give one" in capsys.readouterr().err


@pytest.mark.slow  # a local Ray starts in 10-20 s
@pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (undercap[ray])")
def test_a_slice_estimated_on_ray_matches_the_local_pool(tmp_path: Path) -> None:
    local = _estimate(
        tmp_path / "local" / "e.json", "--proxy-slice", "50%", "--target-accuracy", "0.8"
    )
    ray = _estimate(tmp_path / "ray" / "e.json", "--proxy-slice", "50%", "--target-accuracy", "0.8",
                    "--executor", "ray")  # fmt: skip
    assert ray.extra["config"]["executor"] == "ray" and ray.extra["slice"] == local.extra["slice"]
    assert ray.samples_to_target == local.samples_to_target
    assert ray.extra["curves"] == local.extra["curves"]
