"""The sparse evaluation schedule (estimate/evalsched.py, issue 34): the same N(b) as
dense evaluation for a fraction of the evaluations, on real tiny estimates and on
scripted curves."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import pytest
from conftest import run_files

from undercap.cli import main
from undercap.data.spec import DataSpec
from undercap.errors import UndercapError
from undercap.estimate import EstimateConfig, estimate
from undercap.estimate.config import fingerprint
from undercap.estimate.evalsched import SparseParams, run_sparse
from undercap.train.loop.evalplan import Check, check_z, margin, next_look

# digits: 1438 train / 359 test; a look checks every 80 items (4 checks)
DATA = DataSpec("digits", limit=1500)


def _cfg(schedule: str, **kw: Any) -> EstimateConfig:
    base: dict[str, Any] = dict(
        model="small-cnn",
        data=DATA,
        batch_sizes=(8, 16, 32),
        seeds=(0, 1, 2),
        target_accuracy=0.85,
        max_samples=3_000,
        eval_every_samples=64,
        eval_schedule=schedule,
    )
    base.update(kw)
    return EstimateConfig(**base)


def _run(cfg: EstimateConfig, work: Optional[Path], **kw: Any) -> Any:
    return estimate(cfg, cache_dir=work, torch_device="cpu", progress=False, threads=1, **kw)


def _records(work: Path) -> dict[str, dict[str, Any]]:
    return {n: json.loads(p.read_text()) for n, p in run_files(work).items()}


def test_sparse_n_equals_dense_n_on_real_runs(tmp_path: Path) -> None:
    dense = _run(_cfg("dense"), tmp_path / "d")
    sparse = _run(_cfg("sparse"), tmp_path / "s")
    assert sparse.samples_to_target == dense.samples_to_target
    assert all(n is not None for runs in dense.samples_to_target.values() for n in runs)
    recs = _records(tmp_path / "s")
    evals = [r["eval"] for r in recs.values()]
    assert all(e["schedule"] == "sparse" for e in evals)
    # it did evaluate less: fewer whole-split evaluations than dense's grid points
    dense_points = sum(len(r["curve"]) for r in _records(tmp_path / "d").values())
    assert sum(e["full_evals"] for e in evals) < dense_points
    assert sum(e["screened_items"] for e in evals) > 0
    assert any(e["replayed_samples"] > 0 for e in evals)  # far jumps were taken
    assert all(r["eval"] == {"schedule": "dense"} for r in _records(tmp_path / "d").values())
    assert sparse.extra["config"]["eval_schedule"] == "sparse"
    assert dense.extra["config"]["eval_schedule"] == "dense"
    # the summary says what share of the run time went to evaluating, and how
    from undercap.report.text import estimate_summary

    for eff, name in ((dense, "dense"), (sparse, "sparse")):
        cost = estimate_summary(eff).splitlines()[-1]
        assert f"% evaluating, {name} schedule; 0 runs reused)" in cost, cost
        assert 0.0 < eff.extra["cost"]["eval_wall_s"] < eff.extra["cost"]["wall_s"]
    # less evaluated, counted in held-out items (not timed: the machine's load would
    # decide a comparison of seconds)
    split = 359
    sparse_items = sum(e["full_evals"] * split + e["screened_items"] for e in evals)
    assert sparse_items < dense_points * split


def test_a_small_split_is_checked_more_often(tmp_path: Path) -> None:
    """359 held-out items: a check every 128 (the default) would come twice before the
    split ends, so a look checks every 80 items instead (four checks, in evaluation
    batches of 80), and N(b) is dense's."""
    small = dict(batch_sizes=(16, 32), seeds=(0,))
    dense = _run(_cfg("dense", **small), tmp_path / "d")
    sparse = _run(_cfg("sparse", **small), tmp_path / "s")
    assert sparse.samples_to_target == dense.samples_to_target
    for r in _records(tmp_path / "s").values():
        assert (r["eval"]["schedule"], r["eval"]["screen_samples"]) == ("sparse", 80)
        assert r["eval"]["screened_items"] > 0  # some look stopped early


def test_a_split_too_small_for_checks_runs_dense_exactly(tmp_path: Path) -> None:
    """120 held-out items: four checks would see 27 items each, too few to rule anything
    out, so the runs are dense runs, curve for curve, and say why."""
    small = dict(batch_sizes=(16, 32), seeds=(0,), eval_max_samples=120)
    dense = _run(_cfg("dense", **small), tmp_path / "d")
    sparse = _run(_cfg("sparse", **small), tmp_path / "s")
    assert sparse.samples_to_target == dense.samples_to_target
    by_b = {r["batch_size"]: r for r in _records(tmp_path / "d").values()}
    for r in _records(tmp_path / "s").values():
        assert r["eval"]["schedule"] == "dense" and "too few checks" in r["eval"]["why"]
        assert r["curve"] == by_b[r["batch_size"]]["curve"]


def test_far_looks_without_replay_on_real_runs(tmp_path: Path, monkeypatch: Any) -> None:
    """A GPU's schedule (far looks, no replay), run on the CPU where dense is exactly
    repeatable: the same N(b), nothing trained twice, fewer looks than grid points."""
    cuda_params = EstimateConfig.sparse_params

    def as_on_cuda(self: EstimateConfig, torch_device: str) -> SparseParams:
        return cuda_params(self, "cuda")

    cfg = dict(seeds=(0,), batch_sizes=(8, 32), target_accuracy=0.9, eval_every_samples=32)
    dense = _run(_cfg("dense", **cfg), tmp_path / "d")
    monkeypatch.setattr(EstimateConfig, "sparse_params", as_on_cuda)
    sparse = _run(_cfg("sparse", **cfg), tmp_path / "s")
    assert sparse.samples_to_target == dense.samples_to_target
    grid = {r["batch_size"]: len(r["curve"]) for r in _records(tmp_path / "d").values()}
    for r in _records(tmp_path / "s").values():
        e = r["eval"]
        assert e["replay"] is False and e["replayed_samples"] == 0
        assert e["looks"] < grid[r["batch_size"]]


@pytest.mark.parametrize(
    "items, device, chosen, spacing",
    [
        (2500, "cpu", None, 128),  # the default fits: 17 checks
        (500, "cpu", None, 112),  # 3 checks of 128 -> 4 of 112
        (300, "cpu", None, 67),
        (160, "cpu", None, 36),
        (120, "cpu", None, None),  # 27 items a check: dense
        (300, "cpu", 128, None),  # the user's spacing is kept: 2 checks, dense
        (300, "cpu", 64, 64),
        (300, "cpu", 16, 16),  # however fine
        (2500, "cuda", None, 512),  # a GPU checks at its batches of 512: 4 checks
        (2000, "cuda", None, 512),  # 3: still sparse (far looks, no replay)
        (300, "cuda", None, 512),  # no check: every look whole, far ones skipped
        (300, "cuda", 64, 512),
    ],
)
def test_the_check_spacing_fits_the_split(
    items: int, device: str, chosen: Optional[int], spacing: Optional[int]
) -> None:
    from undercap.estimate.runs import _effective_sparse

    params = SparseParams.default(screen_samples=chosen or 128)
    job = SimpleNamespace(
        sparse=params,
        screen_explicit=chosen is not None,
        eval_max_samples=None,
        torch_device=device,
        data=DATA,
    )
    got = _effective_sparse(job, SimpleNamespace(n_test=items))  # type: ignore[arg-type]
    assert (None if got is None else got.screen_samples) == spacing


def test_reference_runs_give_dense_reference_and_stop(tmp_path: Path) -> None:
    kw: dict[str, Any] = dict(
        batch_sizes=(8, 32),
        seeds=(0, 1),
        target_accuracy=None,
        target_fraction=0.95,
        max_samples=4_000,
        plateau_patience=3,
    )
    dense = _run(_cfg("dense", **kw), tmp_path / "d")
    sparse = _run(_cfg("sparse", **kw), tmp_path / "s")
    t_d, t_s = dense.extra["target"], sparse.extra["target"]
    assert t_s["reference_best_per_seed"] == t_d["reference_best_per_seed"]
    assert sparse.target_accuracy == dense.target_accuracy
    assert sparse.samples_to_target == dense.samples_to_target
    d, s = _records(tmp_path / "d"), _records(tmp_path / "s")
    for name in ("b32-seed0.json", "b32-seed1.json"):
        assert (s[name]["stop"], s[name]["samples_trained"]) == (
            d[name]["stop"],
            d[name]["samples_trained"],
        )
    assert any(d[n]["stop"] == "plateau" for n in ("b32-seed0.json", "b32-seed1.json"))


def test_sparse_and_dense_runs_are_apart_in_the_cache(tmp_path: Path) -> None:
    work = tmp_path / "w"
    small: dict[str, Any] = dict(batch_sizes=(16,), seeds=(0,))
    dense_cfg, sparse_cfg = _cfg("dense", **small), _cfg("sparse", **small)
    # a dense run's key is what it was before schedules existed: caches stay valid
    assert "eval_schedule" not in fingerprint(dense_cfg)
    assert fingerprint(sparse_cfg)["eval_schedule"] == "sparse"
    logs: list[str] = []
    _run(dense_cfg, work, log=logs.append)
    _run(sparse_cfg, work, log=logs.append)
    assert not any("reused" in m for m in logs)
    assert len(list(work.glob("estimate-run/*/value.json"))) == 2
    _run(sparse_cfg, work, log=logs.append)
    _run(dense_cfg, work, log=logs.append)
    assert sum("reused 1" in m for m in logs) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--eval-every", "4096"], "coarser than the sample budget"),
        (["--screen-samples", "5000"], "larger than the 150 held-out samples"),
        (["--screen-samples", "200", "--eval-max-samples", "100"], "larger than the 100"),
        (["--screen-samples", "64", "--eval-schedule", "dense"], "drop one of the two"),
    ],
)
def test_bad_schedule_settings_are_one_line_exit_2(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["estimate", "--model", "small-cnn", "--dataset", "digits", "--limit", "600"]
    args += ["--torch-device", "cpu", "--no-progress", "--batch-sizes", "8,16"]
    args += ["--seeds", "1", "--target-accuracy", "0.8", "--max-samples", "2000"]
    assert main([*args, *extra, "-o", str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_config_rejects_unknown_schedule() -> None:
    with pytest.raises(UndercapError, match="use dense or sparse"):
        _cfg("sometimes").validate()


# --- the schedule's logic on scripted curves (no torch) --------------------------------
def test_margin_and_next_look() -> None:
    # z standard errors of a subset mean, finite population corrected (Cochran 1977)
    assert math.isclose(margin(0.8, 100, 10**9, 4.0), 4 * math.sqrt(0.16 / 100), rel_tol=1e-6)
    assert margin(0.3, 100, 10**9, 1.0) == pytest.approx(0.05)  # p(1-p) at most 1/4
    assert margin(0.8, 500, 500, 4.0) == 0.0  # the whole split: no sampling error
    assert next_look(128, 128, 1.5) == 256 and next_look(1024, 128, 1.5) == 1536
    assert next_look(1000, 64, 1.5) == 1536


def test_a_look_checks_with_a_bonferroni_z_and_stops_only_when_it_can_tell() -> None:
    """A look's checks share its error budget (Bonferroni), come at multiples of the
    check size only, and rule a point out by the margin or by the items left."""
    # 2500 items checked every 128 up to 90% of them: 17 checks, each at z = 3.60
    assert check_z(2500, 128, 2.7e-3) == pytest.approx(3.60, abs=0.01)
    assert check_z(300, 256, 2.7e-3) == pytest.approx(2.78, abs=0.01)  # one check
    z = check_z(2500, 128, 2.7e-3)
    check = Check(0.4, 2500, 128, z)
    assert not check(0.0, 64)  # between marks: no check (the mean is not read)
    assert not check(0.39, 128) and check.m == 128  # at the target: it cannot tell
    assert check(0.10, 256)  # far below: ruled out
    assert check.below(0.3) and not check.below(0.05)  # "far" reads the same prefix
    assert not Check(0.4, 2500, 128, z)(0.0, 2304)  # past 90%: the look finishes
    # 16 of 18 scored at 0.3: the margin (0.119) cannot tell, the 2 left cannot lift it
    late = Check(0.4, 18, 16, check_z(18, 16, 2.7e-3))
    assert late(0.3, 16) and 0.3 + margin(0.4, 16, 18, late.z) > 0.4
    never = Check(0.4, 2500, 128, z)
    assert not never.below(0.4)  # nothing checked yet


def test_a_far_look_stops_once_it_rules_out_the_target_above_the_far_line() -> None:
    """A far look (replay) ends far once its items rule out the far line; with their
    mean at or above that line, once they rule out the target: not far, and no whole
    evaluation spent on a point below the target."""
    from undercap.estimate.evalsched import _FarCheck

    z = check_z(2500, 128, 2.7e-3)

    def far_check() -> Check:
        return _FarCheck(Check(0.35, 2500, 128, z), target=0.4)

    look = far_check()
    assert not look(0.36, 128)  # the margin at 128 (0.155) rules out neither line
    assert look(0.36, 1280) and look.below(0.4) and not look.below(0.35)  # not far
    assert not far_check()(0.34, 1280)  # under the far line: go on, it may show far
    assert far_check()(0.10, 128)  # far


class _Scripted:
    """The Trainer surface run_sparse uses, with a scripted accuracy curve; a look's
    prefix of m items reads the curve's value shifted by `noise(samples, m)`."""

    def __init__(
        self, acc: Callable[[int], float], b: int, target: Optional[float], noise: Any
    ) -> None:
        self.acc, self.b, self.noise = acc, b, noise
        self.cfg = SimpleNamespace(
            eval_every_samples=64, max_samples=6_400, target_accuracy=target, eval_batch_size=64
        )
        self.samples, self.curve, self.samples_to_target = 0, [], None
        self.train_wall_s = self.eval_wall_s = 0.0
        self.eval_items, self.stop, self.trained = 4_000, False, 0
        self.plan: Any = None  # as Trainer.plan: a device run's plan decides the looks

    @property
    def done(self) -> bool:
        return self.samples_to_target is not None or self.samples >= self.cfg.max_samples

    def step(self) -> None:
        self.samples += self.b
        self.trained += self.b

    def eval_due(self, before: int) -> bool:
        every = self.cfg.eval_every_samples
        crossed = self.samples // every > before // every
        if self.plan is not None:
            crossed = crossed and self.plan.wants(self.samples)
        return crossed or self.samples >= self.cfg.max_samples

    def run(self) -> None:
        """Trainer.run's loop: the plan's look at every due grid point."""
        while not self.done:
            before = self.samples
            self.step()
            if self.eval_due(before):
                self.plan.look(self, force=self.samples >= self.cfg.max_samples)

    def sequential(self, stop: Any) -> Any:
        """Batches of 64 items, each check reading the scripted prefix mean."""
        for m in range(64, self.eval_items, 64):
            if stop(self.acc(self.samples) + self.noise(self.samples, m), m):
                return None, SimpleNamespace(items=m, complete=False)
        return self.evaluate(), SimpleNamespace(items=self.eval_items, complete=True)

    def evaluate(self) -> Any:
        a = self.acc(self.samples)
        self.curve.append(SimpleNamespace(samples=self.samples, accuracy=a))
        if self.plan is not None:
            self.plan.evaluated(self.samples, a)
        target = self.cfg.target_accuracy
        if target is not None and a >= target and self.samples_to_target is None:
            self.samples_to_target = self.samples
        return self.curve[-1]

    def state_dict(self) -> dict[str, Any]:
        keys = ("samples", "curve", "samples_to_target", "train_wall_s", "eval_wall_s")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, list(v) if k == "curve" else v)


def _wobbly(s: int) -> float:
    """Rises, touches 0.6 at 3008-3100 (a grid point for every b here), dips, and
    stays above from 3600 on."""
    base = 0.2 + 0.4 * s / 3_600
    return max(0.61 if 3_008 <= s <= 3_100 else 0.0, min(base, 0.59) if s < 3_600 else base)


def _dense_n(acc: Callable[[int], float], b: int, target: float) -> Optional[int]:
    t = _Scripted(acc, b, target, lambda s, m: 0.0)
    while not t.done:
        before = t.samples
        t.step()
        if t.eval_due(before):
            t.evaluate()
    return t.samples_to_target


PARAMS = SparseParams(screen_samples=256, growth=1.5, far_gap=0.05, jumps=True, replay=True)


@pytest.mark.parametrize("b", [8, 64, 256])
@pytest.mark.parametrize("jumps", [True, False])
@pytest.mark.parametrize("items", [4_000, 300])  # 300: one check, mostly whole evaluations
def test_scripted_first_crossing_is_dense(b: int, jumps: bool, items: int) -> None:
    """The first crossing is a one-interval touch before a dip: dense reports it, and
    so must the sparse schedule (looks that err within their margin included)."""
    params = SparseParams(256, 1.5, 0.05, jumps, replay=jumps)
    want = _dense_n(_wobbly, b, 0.6)
    assert want is not None and want < 3_600
    z = check_z(items, 256, params.look_error)
    t = _Scripted(_wobbly, b, 0.6, lambda s, m: (-1) ** (s // 64) * 0.9 * margin(0.6, m, items, z))
    t.eval_items = items
    stats = run_sparse(t, 0.6, None, params)
    assert (stats.stop, t.samples_to_target) == ("target", want)
    if jumps or items > 300:  # else nothing to save: every point is a whole evaluation
        assert stats.full_evals < len(range(64, want + 1, max(b, 64)))
    if jumps and b < 256:
        assert stats.replayed_samples > 0 and t.trained > want


@pytest.mark.parametrize("b", [8, 32, 128])
def test_scripted_far_looks_without_replay_keep_a_concave_crossing(b: int) -> None:
    """CUDA (no replay): far looks skip grid points on the rise, never train a sample
    twice, and a concave curve's crossing stays dense's (the plan's one assumption)."""

    def acc(s: int) -> float:  # concave, wobbling 0.01 near the top; crosses 0.6 at ~2900
        return 0.7 * (1.0 - math.exp(-s / 1_500)) - 0.01 * ((s // 64) % 2)

    params = SparseParams(256, 1.5, 0.05, jumps=True, replay=False)
    want = _dense_n(acc, b, 0.6)
    z = check_z(4_000, 256, params.look_error)
    t = _Scripted(acc, b, 0.6, lambda s, m: (-1) ** (s // 64) * 0.9 * margin(0.6, m, 4_000, z))
    stats = run_sparse(t, 0.6, None, params)
    assert (stats.stop, t.samples_to_target) == ("target", want)
    assert stats.replayed_samples == 0 and t.trained == want
    grid = len(range(64, want + 1, max(b, 64)))
    assert stats.looks < grid  # far grid points were skipped, not looked at
    assert stats.full_evals < grid


def test_an_estimate_replays_on_a_cpu_only() -> None:
    cfg = EstimateConfig(model="small-cnn", data=DATA, batch_sizes=(8,), seeds=(0,))
    cpu, cuda = cfg.sparse_params("cpu"), cfg.sparse_params("cuda")
    assert cpu.jumps and cpu.replay and cuda.jumps and not cuda.replay


def test_scripted_reference_run_plateau_is_dense() -> None:
    """Reference runs: the best accuracy and the plateau stop of dense."""

    def acc(s: int) -> float:  # rises to 0.7, wobbles, then falls well below (diverges)
        wobble = 0.01 if (s // 64) % 3 == 0 else 0.0
        return min(0.2 + s / 4_000, 0.7) - wobble - (0.3 if s > 2_400 else 0.0)

    dense = _Scripted(acc, 32, None, lambda s, m: 0.0)
    best, since = -1.0, 0
    while not dense.done:
        before = dense.samples
        dense.step()
        if dense.eval_due(before):
            dense.evaluate()
            a = dense.curve[-1].accuracy
            best, since = (a, 0) if a > best else (best, since + 1)
            if since >= 8:
                break
    t = _Scripted(acc, 32, None, lambda s, m: 0.0)
    stats = run_sparse(t, None, 8, PARAMS)
    assert stats.stop == "plateau" and t.samples == dense.samples
    assert max(p.accuracy for p in t.curve) == best
    assert stats.full_evals < len(dense.curve)


def test_channels_last_evaluation_scores_what_the_stored_layout_does() -> None:
    """Sparse CPU runs evaluate image inputs in channels-last layout (faster on a CPU):
    the same accuracy item for item, and the model's weights keep their layout."""
    import torch

    from undercap.data.base import Splits
    from undercap.models.weights import initial_model
    from undercap.train.loop import LoopConfig, Trainer

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(400, 3, 16, 16, generator=g), torch.randint(0, 4, (400,), generator=g)
    splits = Splits("rgb", "image", x[:300], y[:300], x[300:], y[300:], num_classes=4)
    scores = []
    for channels_last in (False, True):
        model, _ = initial_model("small-cnn", splits, init_seed=0, pretrained=None)
        cfg = LoopConfig(
            batch_size=16, lr=1e-3, eval_channels_last=channels_last, eval_batch_size=50
        )
        tr = Trainer(model, splits, cfg, "cpu")
        for _ in range(5):
            tr.step()
        assert tr._x_eval.is_contiguous() != channels_last  # 3 channels: the layouts differ
        assert all(p.is_contiguous() for p in tr.model.parameters())
        _, first = tr.sequential(lambda mean, m, sd: True)  # a look stopped after 50 items
        scores.append((tr.evaluate().accuracy, first.metric, first.items))
    assert scores[0] == scores[1]


def test_sparse_runs_that_never_near_the_target_end_in_the_one_line_error(tmp_path: Path) -> None:
    """Looks rule out every grid point of a hopeless run: its one whole evaluation is
    the last step's, past a budget the batch size does not divide (32 x 7 = 224 > 200)."""
    cfg = _cfg("sparse", batch_sizes=(32,), seeds=(0,), target_accuracy=0.999, max_samples=200)
    with pytest.raises(UndercapError, match=r"no batch size reached .* b=32 0\.\d+"):
        _run(cfg, tmp_path)
    (record,) = _records(tmp_path).values()
    assert [p[0] for p in record["curve"]] == [224] and record["eval"]["full_evals"] == 1


def _trainer_on_noise(**cfg_kw: Any) -> Any:
    import torch

    from undercap.data.base import Splits
    from undercap.models.weights import initial_model
    from undercap.train.loop import LoopConfig, Trainer

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(700, 3, 16, 16, generator=g), torch.randint(0, 4, (700,), generator=g)
    splits = Splits("rgb", "image", x[:300], y[:300], x[300:], y[300:], num_classes=4)
    model, _ = initial_model("small-cnn", splits, init_seed=0, pretrained=None)
    tr = Trainer(model, splits, LoopConfig(batch_size=16, lr=1e-2, **cfg_kw), "cpu")
    for _ in range(8):  # batch norm's running statistics move off their initial values
        tr.step()
    return tr


def test_folded_evaluation_scores_what_the_model_does() -> None:
    """Sparse CPU runs evaluate a copy with batch norm folded into the convolutions
    (train/loop/fold.py): the same accuracy, the loss to float rounding, the model itself
    untouched and still in training mode; the copy is rebuilt after a step."""
    plain = _trainer_on_noise(eval_batch_size=128, eval_channels_last=True)
    fold = _trainer_on_noise(eval_batch_size=128, eval_channels_last=True, eval_fold_bn=True)
    a, b = plain.evaluate(), fold.evaluate()
    assert a.accuracy == b.accuracy and b.loss == pytest.approx(a.loss, rel=1e-5)
    twin = fold._fold.model_at(fold.model, fold.steps)
    assert twin is not fold.model and not any(
        type(m).__name__.startswith("BatchNorm") for m in twin.modules()
    )
    assert fold.model.training and fold._fold.model_at(fold.model, fold.steps) is twin
    fold.step()
    plain.step()
    assert fold._fold.model_at(fold.model, fold.steps) is not twin
    assert fold.evaluate().accuracy == plain.evaluate().accuracy


def test_a_model_fold_cannot_trace_is_evaluated_as_it_is() -> None:
    import torch
    from torch import nn

    from undercap.train.loop.fold import FoldCache, folded

    class Branchy(nn.Module):  # data-dependent control flow: fx cannot trace it
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(self.conv(x)) if x.sum() > 0 else self.conv(x)

    model = Branchy()
    assert folded(model) is None and model.training
    assert folded(nn.Sequential(nn.Linear(3, 2))) is None  # no batch norm: nothing to fold
    cache = FoldCache()
    assert cache.model_at(model, 1) is model and cache.model_at(model, 2) is model


def test_a_sequential_look_that_runs_to_the_end_is_the_whole_evaluation() -> None:
    """A look no check stops is evaluate() float for float (its curve point); one that
    stops scores a prefix only and leaves the curve alone."""
    tr = _trainer_on_noise(eval_batch_size=64)
    whole = tr.evaluate()
    point, done = tr.sequential(lambda mean, m, sd: False)
    assert point == whole and done.complete and done.items == 400
    point, done = tr.sequential(lambda mean, m, sd: m >= 128)
    assert point is None and not done.complete and done.items == 128
    assert len(tr.curve) == 2
