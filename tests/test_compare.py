"""The comparison's orchestration: choices, run sharing, and a tiny real comparison."""

from __future__ import annotations

import csv
import json

import pytest

from undercap.artifacts import Profile, ProfileRow
from undercap.artifacts.comparison import ChoiceRecord, RunRecord, summarize, summary_for
from undercap.recipes.baselines import safe_frequencies
from undercap.recipes.common import TrainingSetup
from undercap.recipes.compare import CompareConfig, choose_all, run_comparison
from undercap.recipes.device_runs import _reusable, train_all

FREQS = (100.0, 200.0, 300.0)


def _profile(model: str, power: dict[int, tuple[float, ...]]) -> Profile:
    """t(b, f) = 1 / (b * f) per sample (bigger and faster is quicker), given powers."""
    rows = [
        ProfileRow(b, f, 1.0 / (b * f) + 1e-5, p, p)
        for b, ps in power.items()
        for f, p in zip(FREQS, ps)
    ]
    return Profile(device={"name": "sim:x"}, model=model, input_shape=(1, 8, 8), rows=tuple(rows))


LIGHT = _profile("light", {16: (3.0, 3.2, 3.4), 64: (3.1, 3.5, 3.9)})
HEAVY = _profile("heavy", {64: (3.3, 4.5, 6.0)})


def test_safe_frequency_from_every_model_and_choices():
    safe = safe_frequencies([LIGHT, HEAVY], [3.6, 5.0, None])
    assert safe == {3.6: 100.0, 5.0: 200.0, None: 300.0}
    r_proxy = {16: 0.2, 64: 1.0}  # small batches need far fewer samples on the proxy
    r_target = {16: 0.5, 64: 1.0}
    choices = choose_all(LIGHT, r_proxy, r_target, [None, 3.6], safe)
    by = {(c.method, c.power_limit_w): c for c in choices}
    assert [c.power_limit_w for c in choices[:4]] == [3.6] * 4  # tight limits first
    b1 = by[("baseline1", 3.6)]
    assert (b1.batch_size, b1.freq_mhz, b1.safe_freq_mhz) == (64, 100.0, 100.0)
    # Baseline 2 at the safe frequency: t*r = 0.2/(16*100) < 1/(64*100)
    assert (by[("baseline2", 3.6)].batch_size, by[("baseline2", 3.6)].freq_mhz) == (16, 100.0)
    # ours: b=64 feasible up to 200 MHz (3.5 W), b=16 up to 300 MHz; r_proxy favours 16
    assert (by[("ours", 3.6)].batch_size, by[("ours", 3.6)].freq_mhz) == (16, 300.0)
    # oracle with r_target: 0.5/(16*300) = 1.04e-4 > 1/(64*200) = 7.8e-5 -> b=64 @ 200
    assert (by[("oracle", 3.6)].batch_size, by[("oracle", 3.6)].freq_mhz) == (64, 200.0)
    assert by[("ours", None)].safe_freq_mhz is None
    assert by[("baseline1", None)].freq_mhz == 300.0


def _fake_run(b: int, f: float, seed: int, limit: float | None, events: int = 0) -> RunRecord:
    return RunRecord(
        "",
        limit,
        seed,
        b,
        f,
        True,
        1000.0 / (b * f),
        1.0,
        3.0,
        3.0,
        100,
        100,
        0.9,
        guard_events=events,
    )


def test_train_all_shares_identical_runs_tight_limits_first():
    calls = []

    def train_fn(b, f, seed, limit, precision="fp32"):
        calls.append((b, f, seed, limit))
        return _fake_run(b, f, seed, limit, events=1 if (b, limit) == (32, 4.0) else 0)

    def choice(method, limit, b, f):
        return ChoiceRecord(method, limit, b, f, 1e-3, 3.0, 1.0)

    choices = [
        choice("ours", None, 16, 300.0),
        choice("ours", 4.0, 16, 300.0),  # same config at a tighter limit: trained first
        choice("oracle", 4.0, 16, 300.0),  # same limit and config: shared
        choice("baseline1", 4.0, 32, 300.0),  # the guard acted: not reusable elsewhere
        choice("baseline1", None, 32, 300.0),
    ]
    runs = train_all(choices, [0, 1], train_fn, log=lambda _m: None)
    assert calls == [
        (16, 300.0, 0, 4.0),
        (16, 300.0, 1, 4.0),
        (32, 300.0, 0, 4.0),
        (32, 300.0, 1, 4.0),
        (32, 300.0, 0, None),
        (32, 300.0, 1, None),
    ]
    assert len(runs) == 10
    ours_none = [r for r in runs if r.method == "ours" and r.power_limit_w is None]
    assert {r.shared_from for r in ours_none} == {"ours@4 W"}
    assert {r.seed for r in ours_none} == {0, 1}
    oracle = [r for r in runs if r.method == "oracle"]
    assert all(r.shared_from == "ours@4 W" and r.power_limit_w == 4.0 for r in oracle)
    b1_none = [r for r in runs if r.method == "baseline1" and r.power_limit_w is None]
    assert all(r.shared_from is None and r.guard_events == 0 for r in b1_none)


def test_reusable_rule():
    clean, guarded = _fake_run(8, 1.0, 0, 4.0), _fake_run(8, 1.0, 0, 4.0, events=2)
    assert _reusable(4.0, clean, 5.0) and _reusable(4.0, clean, None)
    assert not _reusable(4.0, clean, 3.0)  # a tighter limit might make the guard act
    assert not _reusable(None, clean, 4.0)  # trained without a guard
    assert _reusable(4.0, guarded, 4.0) and not _reusable(4.0, guarded, 5.0)


def test_config_validation():
    from undercap.data.spec import DataSpec
    from undercap.errors import UndercapError

    setup = TrainingSetup(
        model="small-cnn", batch_sizes=(16, 32), max_samples=64, eval_every_samples=32
    )
    base = dict(
        device="sim:jetson-nano",
        model="small-cnn",
        proxy=DataSpec("digits"),
        target=DataSpec("digits"),
        setup=setup,
    )
    for kwargs, msg in [
        ({"power_limits_w": (), "target_accuracy": 0.5}, "at least one"),
        ({"power_limits_w": (3.0, 3.0), "target_accuracy": 0.5}, "distinct"),
        ({"power_limits_w": (-1.0,), "target_accuracy": 0.5}, "positive"),
        ({"power_limits_w": (3.0,)}, "exactly one"),
    ]:
        with pytest.raises(UndercapError, match=msg):
            CompareConfig(**base, **kwargs).validate()
    assert DataSpec("digits", limit=100, seed=2).label == (
        "digits [100-sample subset, split seed 2]"
    )


def test_tiny_comparison_end_to_end(tmp_path):
    """A real comparison: digits slice, 2 batch sizes, 1 seed, a binding cap and none."""
    from undercap.data.spec import DataSpec

    setup = TrainingSetup(
        model="small-cnn",
        batch_sizes=(16, 64),
        max_samples=3000,
        eval_every_samples=128,
        torch_device="cpu",
    )
    cfg = CompareConfig(
        device="sim:jetson-nano",
        model="small-cnn",
        proxy=DataSpec("digits", limit=300, seed=1),
        target=DataSpec("digits", limit=600),
        power_limits_w=(3.5, None),
        setup=setup,
        seeds=(0,),
        target_accuracy=0.7,
        cache_dir=str(tmp_path / "cache"),
    )
    out = tmp_path / "out"
    c = run_comparison(cfg, out, progress=False, log=lambda _m: None)
    for name in (
        "comparison.json",
        "comparison.md",
        "runs.csv",
        "summary.csv",
        "time_to_accuracy.png",
        "energy.png",
        "profile.json",
        "efficiency-proxy.json",
        "efficiency-target.json",
        "profile_3.5W.png",
    ):
        assert (out / name).is_file(), name
    assert c.simulated and len(c.runs) == 8 and len(c.choices) == 8
    safe = c.settings["safe_freq_mhz"]
    assert safe["none"] == 921.6 and safe["3.5 W"] < 921.6  # heavier models bind the cap
    for r in c.runs:
        assert r.reached and r.time_to_accuracy_s > 0 and r.energy_j > 0
        if r.power_limit_w is not None:
            assert c.choice(r.method, r.power_limit_w).peak_power_w <= 3.5
    rows = summarize(c)
    b1 = summary_for(rows, "baseline1", 3.5)
    assert b1.freq_mhz == safe["3.5 W"] and b1.batch_size == 64
    ours = summary_for(rows, "ours", 3.5)
    # the measured speed-up is the ratio of the measured times
    assert ours.speedup_vs_baseline1 == pytest.approx(b1.time_mean_s / ours.time_mean_s)
    assert "simulated" in (out / "comparison.md").read_text().splitlines()[0]
    with open(out / "runs.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 8
    saved = json.loads((out / "comparison.json").read_text())
    assert saved["schema"] == "undercap.comparison/1" and len(saved["summary"]) == 8
    # a re-run reuses every profile, estimate and training run from the cache
    messages: list[str] = []
    again = run_comparison(cfg, tmp_path / "out2", progress=False, log=messages.append)
    assert [r.time_to_accuracy_s for r in again.runs] == [r.time_to_accuracy_s for r in c.runs]
    started = [m for m in messages if m.startswith("run ")]
    assert len(started) == len([r for r in again.runs if r.shared_from is None]) < 8
    assert len([m for m in messages if "reusing finished run" in m]) == len(started)
    assert any("reusing cached profile of resnet18" in m for m in messages)
