"""Efficiency estimation: real small-cnn on a slice of the bundled digits."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from conftest import run_files

from undercap.artifacts import Efficiency, load_efficiency, save_efficiency
from undercap.data.spec import DataSpec
from undercap.errors import UndercapError
from undercap.estimate import EstimateConfig, aggregate, estimate
from undercap.estimate.runs import RUN_SCHEMA, covers, first_crossing

# 600 digits -> 480 train / 120 test; the small CNN passes 0.8 in a few hundred samples.
DATA = DataSpec("digits", limit=600)


def _cfg(**kw: object) -> EstimateConfig:
    base = dict(
        model="small-cnn",
        data=DATA,
        batch_sizes=(8, 32),
        seeds=(0, 1),
        target_accuracy=0.8,
        max_samples=2_000,
        eval_every_samples=64,
    )
    base.update(kw)
    return EstimateConfig(**base)  # type: ignore[arg-type]


def _run(cfg: EstimateConfig, work: Path, **kw: object) -> Efficiency:
    return estimate(cfg, cache_dir=work, torch_device="cpu", progress=False, **kw)  # type: ignore[arg-type]


def test_estimate_artifact_round_trips(tmp_path: Path) -> None:
    eff = _run(_cfg(), tmp_path / "w")
    path = save_efficiency(tmp_path / "eff.json", eff)
    back = load_efficiency(path)
    assert back.to_dict() == eff.to_dict()
    assert back.batch_sizes == (8, 32)
    assert back.relative[32] == 1.0
    for b in (8, 32):
        runs = back.samples_to_target[b]
        assert len(runs) == 2 and all(n is not None and n % 64 == 0 for n in runs), runs
    # N(b) is the first evaluation at or above the target on each stored curve
    for b in (8, 32):
        for s, n in zip(("0", "1"), back.samples_to_target[b]):
            curve = [(int(x), float(a)) for x, a in back.extra["curves"][str(b)][s]]
            assert first_crossing(curve, 0.8) == n
            assert all(a < 0.8 for x, a in curve if x < n)
    mean8 = statistics.fmean(back.samples_to_target[8])
    mean32 = statistics.fmean(back.samples_to_target[32])
    assert math.isclose(back.relative[8], mean8 / mean32)
    spread = back.extra["relative_spread"]["8"]
    assert spread["min"] <= back.relative[8] <= spread["max"] and spread["n"] == 2
    cost = back.extra["cost"]
    assert cost["runs"] == 4 and cost["samples_trained"] > 0 and cost["wall_s"] > 0
    assert back.extra["target"] == {"mode": "absolute", "accuracy": 0.8, "accuracy_kind": "sample"}
    assert back.extra["provenance"]["seeds"] == [0, 1]
    assert back.extra["init"]["init"] == "random"


def test_rerun_reuses_every_finished_run(tmp_path: Path) -> None:
    work = tmp_path / "w"
    first = _run(_cfg(), work)
    named = run_files(work)
    files = list(named.values())
    assert sorted(named) == [
        "b32-seed0.json",
        "b32-seed1.json",
        "b8-seed0.json",
        "b8-seed1.json",
    ]
    before = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files}
    logs: list[str] = []
    second = _run(_cfg(), work, log=logs.append)
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in files} == before
    assert any("reused 4 finished run(s)" in m and "ran 0" in m for m in logs), logs
    assert second.samples_to_target == first.samples_to_target
    assert second.extra["cost"]["reused_runs"] == 4
    # a third seed only trains the new seed's runs
    logs.clear()
    third = _run(_cfg(seeds=(0, 1, 2)), work, log=logs.append)
    assert any("reused 4" in m and "ran 2" in m for m in logs), logs
    assert third.samples_to_target[8][:2] == first.samples_to_target[8]


def test_other_configs_share_the_cache_without_mixing(tmp_path: Path) -> None:
    """The cache is keyed by what fixes a run's trajectory: another learning rate
    runs anew beside the first config's runs, and each is reused only by its own."""
    work = tmp_path / "w"
    a = _run(_cfg(batch_sizes=(16,), seeds=(0,)), work)
    logs: list[str] = []
    b = _run(_cfg(batch_sizes=(16,), seeds=(0,), lr=3e-3), work, log=logs.append)
    assert not any("reused" in m for m in logs) and b.extra["config"]["base_lr"] == 3e-3
    assert len(list(work.glob("estimate-run/*/value.json"))) == 2
    again = _run(_cfg(batch_sizes=(16,), seeds=(0,)), work, log=logs.append)
    assert any("reused 1" in m and "ran 0" in m for m in logs)
    assert again.samples_to_target == a.samples_to_target
    fresh = _run(_cfg(batch_sizes=(16,), seeds=(0,)), work, fresh=True, log=logs.append)
    assert fresh.extra["cost"]["reused_runs"] == 0


def test_relative_target_is_fraction_of_largest_batch_best(tmp_path: Path) -> None:
    cfg = _cfg(target_accuracy=None, target_fraction=0.9, max_samples=1_024)
    eff = _run(cfg, tmp_path / "w")
    t = eff.extra["target"]
    best32 = [max(a for _, a in eff.extra["curves"]["32"][s]) for s in ("0", "1")]
    assert t["mode"] == "fraction" and t["reference_batch_size"] == 32
    assert math.isclose(t["reference_accuracy"], statistics.fmean(best32))
    assert math.isclose(eff.target_accuracy, 0.9 * statistics.fmean(best32))
    # the reference runs trained the whole budget, the others stopped at the target
    runs = {n: json.loads(p.read_text()) for n, p in run_files(tmp_path / "w").items()}
    assert all(r["schema"] == RUN_SCHEMA for r in runs.values())
    assert runs["b32-seed0.json"]["samples_trained"] == 1_024
    assert runs["b32-seed0.json"]["stop"] == "budget"
    assert runs["b8-seed0.json"]["stop"] in ("target", "budget")
    load_efficiency(save_efficiency(tmp_path / "e.json", eff))


def test_plateau_ends_reference_runs_early(tmp_path: Path) -> None:
    cfg = _cfg(
        batch_sizes=(8, 32),
        seeds=(0,),
        target_accuracy=None,
        target_fraction=0.9,
        max_samples=6_000,
        plateau_patience=2,
    )
    eff = _run(cfg, tmp_path / "w")
    ref = json.loads(run_files(tmp_path / "w")["b32-seed0.json"].read_text())
    assert ref["stop"] == "plateau" and ref["samples_trained"] < 6_000
    accs = [p[1] for p in ref["curve"]]
    best_before = max(accs[:-2])
    assert accs[-1] <= best_before and accs[-2] <= best_before  # 2 evals without a new best
    assert eff.extra["config"]["plateau_patience"] == 2
    # the same request is answered from the work dir
    logs: list[str] = []
    _run(cfg, tmp_path / "w", log=logs.append)
    assert any("reused 2" in m for m in logs), logs


def _record(b: int, seed: int, curve: list[tuple[int, float]], stop: str = "budget") -> dict:
    return {
        "schema": RUN_SCHEMA,
        "batch_size": b,
        "seed": seed,
        "stop": stop,
        "max_samples": 1000,
        "plateau_patience": None,
        "samples_trained": curve[-1][0],
        "curve": [[x, a, 0.0] for x, a in curve],
        "wall_s": 1.0,
        "train_wall_s": 0.8,
        "eval_wall_s": 0.2,
        "accuracy_kind": "sample",
        "init": {"init": "random"},
    }


def test_aggregate_excludes_batch_sizes_that_never_reached(tmp_path: Path) -> None:
    cfg = _cfg(batch_sizes=(8, 16, 32), seeds=(0, 1), max_samples=1000)
    up = [(200, 0.5), (400, 0.85), (600, 0.9)]
    late = [(200, 0.5), (400, 0.6), (800, 0.82)]
    flat = [(500, 0.4), (1000, 0.5)]
    records = {
        (8, 0): _record(8, 0, up),
        (8, 1): _record(8, 1, late),
        (16, 0): _record(16, 0, up),
        (16, 1): _record(16, 1, flat),
        (32, 0): _record(32, 0, flat),
        (32, 1): _record(32, 1, flat),
    }
    eff = aggregate(cfg, records, {"mode": "absolute", "accuracy": 0.8})
    assert eff.samples_to_target == {8: (400, 800), 16: (400, None), 32: (None, None)}
    # b=32 never reached: excluded, and r(b) is relative to b=16
    assert eff.relative == {8: 1.5, 16: 1.0}
    assert eff.excluded_batch_sizes == (32,) and eff.extra["excluded"] == [32]
    assert eff.extra["reference_batch_size"] == 16
    assert eff.extra["relative_spread"]["8"] == {
        "std": pytest.approx(math.sqrt(0.5)),
        "min": 1.0,
        "max": 2.0,
        "n": 2,
    }
    assert eff.extra["reached"] == {"8": [2, 2], "16": [1, 2], "32": [0, 2]}
    notes = " | ".join(eff.extra["notes"])
    assert "relative to b=16" in notes and "b=16: 1 of 2 seeds" in notes and "[32]" in notes
    Efficiency.from_dict(json.loads(json.dumps(eff.to_dict())))  # valid artifact
    from undercap.report.efficiency import plot_efficiency

    png = plot_efficiency(eff, tmp_path / "excluded.png")  # hatched bar for b=32
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(UndercapError, match="no batch size reached"):
        aggregate(cfg, records, {"mode": "absolute", "accuracy": 0.95})


def test_covers_reuses_only_runs_that_answer_the_request() -> None:
    reached = _record(8, 0, [(100, 0.5), (200, 0.9)], stop="target")
    assert covers(reached, 0.9, 1000, None)  # reached this target
    assert covers(reached, 0.7, 1000, None)  # a lower target is crossed on its curve
    assert not covers(reached, 0.95, 1000, None)  # stopped early: may reach it later
    assert not covers(reached, 0.9, 150, None)  # reached only past a smaller budget
    assert not covers(reached, None, 1000, None)  # a reference needs the whole budget
    full = _record(8, 0, [(500, 0.5), (1000, 0.6)])
    assert covers(full, 0.95, 1000, None) and covers(full, None, 800, None)
    assert not covers(full, 0.95, 2000, None)  # a larger budget might reach it
    plateau = dict(_record(8, 0, [(100, 0.5), (200, 0.5)], stop="plateau"), plateau_patience=1)
    assert covers(plateau, None, 1000, 1) and not covers(plateau, None, 1000, 2)


def test_fresh_head_keeps_seeded_head_and_pretrained_body(tmp_path: Path) -> None:
    import torch

    from undercap.data.spec import load_splits
    from undercap.models import save_weights
    from undercap.models.weights import initial_model

    splits = load_splits(DataSpec("digits", limit=100))
    trained, _ = initial_model("small-cnn", splits, init_seed=123, pretrained=None)
    weights = save_weights(trained, tmp_path / "w.pt", {"dataset": "digits"})
    loaded, info = initial_model("small-cnn", splits, init_seed=5, pretrained=weights)
    fresh, info_f = initial_model(
        "small-cnn", splits, init_seed=5, pretrained=weights, fresh_head=True
    )
    scratch, _ = initial_model("small-cnn", splits, init_seed=5, pretrained=None)
    t, lo, f, s = (m.state_dict() for m in (trained, loaded, fresh, scratch))
    assert all(torch.equal(lo[k], t[k]) for k in t)  # same class count: everything loads
    for k in t:
        expected = s[k] if k.startswith("head.") else t[k]
        assert torch.equal(f[k], expected), k
    assert not torch.equal(f["head.weight"], t["head.weight"])
    assert info_f["fresh_head"] and info_f["weights_meta"]["fresh_tensors"] == [
        "head.bias",
        "head.weight",
    ]
    assert not info["fresh_head"]
    with pytest.raises(UndercapError, match="--fresh-head needs --pretrained"):
        _cfg(fresh_head=True).validate()


def test_test_split_prefix_is_not_class_sorted(tmp_path: Path) -> None:
    """A file stored class by class must not make eval_max_samples score one class."""
    import numpy as np
    import torch

    from undercap.data import load_dataset
    from undercap.data.spec import load_splits

    y = np.repeat(np.arange(4, dtype=np.uint8), 50)  # sorted: 50 x class 0, then 1, ...
    x = np.random.default_rng(0).integers(0, 255, (200, 8, 8, 3), dtype=np.uint8)
    np.savez(tmp_path / "sorted.npz", x=x, y=y)
    spec = DataSpec("npz:sorted.npz", data_dir=str(tmp_path))
    raw = load_dataset(spec.dataset, data_dir=spec.data_dir)
    splits = load_splits(spec)
    assert len(set(splits.y_test[:10].tolist())) >= 3
    assert torch.equal(splits.y_test.sort().values, raw.y_test.sort().values)
    assert torch.equal(load_splits(spec).y_test, splits.y_test)  # deterministic


def test_config_validation() -> None:
    with pytest.raises(UndercapError, match="give --target-accuracy or --target-fraction"):
        _cfg(target_accuracy=None).validate()
    with pytest.raises(UndercapError, match="must be a fraction"):
        _cfg(target_fraction=1.5).validate()  # beside an absolute target: a slice's cap
    _cfg(target_fraction=0.9).validate()  # both: the lower of the two (a slice's target)
    with pytest.raises(UndercapError, match="below the largest batch"):
        _cfg(max_samples=16).validate()
    with pytest.raises(UndercapError, match="distinct"):
        _cfg(batch_sizes=(8, 8)).validate()


def test_aggregate_counts_skipped_seeds_as_not_reached() -> None:
    cfg = _cfg(batch_sizes=(8, 16), seeds=(0, 1, 2), max_samples=1000)
    up = [(200, 0.5), (400, 0.85)]
    records = {(8, s): _record(8, s, up) for s in (0, 1, 2)}
    records[(16, 0)] = _record(16, 0, [(500, 0.3), (1000, 0.4)])  # hopeless: far below
    eff = aggregate(cfg, records, {"mode": "absolute", "accuracy": 0.8}, skipped=[(16, 1), (16, 2)])
    assert eff.samples_to_target[16] == (None, None, None) and eff.excluded_batch_sizes == (16,)
    assert eff.extra["best_accuracy"]["16"] == [0.4] and eff.extra["skipped"] == [[16, 1], [16, 2]]
    assert any("b=16: seed(s) [1, 2] skipped" in n for n in eff.extra["notes"])
    assert eff.extra["cost"]["runs"] == 4  # only what ran is charged
    with pytest.raises(UndercapError, match=r"best accuracy reached: b=8 0.850, b=16 0.400"):
        aggregate(cfg, records, {"mode": "absolute", "accuracy": 0.95}, skipped=[(16, 1)])
