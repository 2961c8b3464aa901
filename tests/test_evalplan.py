"""The device's sparse evaluation plan (train/loop/evalplan.py): the same time to accuracy as
dense evaluation, for fewer evaluations and looks that stop early.

Two levels: the plan against brute force on curves whose per-item verdicts are known
(a fake trainer: no torch training), and whole device runs on the simulated Nano,
sparse beside dense, interrupted and resumed."""

import math
from types import SimpleNamespace

import pytest
import torch

from undercap import defaults
from undercap.devices.simulated import SimulatedDevice
from undercap.errors import UndercapError
from undercap.train import train_on_device
from undercap.train.loop.evalplan import EvalPlan, SparseParams, next_look, secant_look
from undercap.train.spec import TrainSpec

EVERY = 128


class CurveTrainer:
    """A trainer whose held-out verdicts follow `curve` (samples -> accuracy): item i is
    right at s samples iff u_i < curve(s), u fixed uniform draws (a random order), so a
    prefix's score is a real subset mean and the whole split's is the curve up to 1/n.
    Its looks score batches of `batch` items, as Trainer.sequential does."""

    def __init__(self, curve, n_items: int = 2000, seed: int = 0, batch: int = 128) -> None:
        self.curve, self.samples = curve, 0
        self.u = torch.rand(n_items, generator=torch.Generator().manual_seed(seed))
        self.scored = 0
        self.cfg = SimpleNamespace(eval_batch_size=batch)
        self.plan = None
        self.points = []  # (samples, accuracy) of every whole evaluation

    @property
    def eval_items(self) -> int:
        return int(self.u.numel())

    def _right(self):
        return (self.u < self.curve(self.samples)).double()

    def sequential(self, stop):
        right, b = self._right(), self.cfg.eval_batch_size
        for m in range(b, self.eval_items, b):  # after each batch but the last
            if stop(float(right[:m].mean()), m):
                self.scored += m
                return None, SimpleNamespace(items=m)
        return self.evaluate(), SimpleNamespace(items=self.eval_items)

    def evaluate(self) -> float:
        acc = self.whole()
        self.points.append((self.samples, acc))
        if self.plan is not None:
            self.plan.evaluated(self.samples, acc)
        return acc

    def whole(self) -> float:
        self.scored += self.eval_items
        return float(self._right().mean())


def dense_crossing(tr: CurveTrainer, target: float, budget: int):
    for s in range(EVERY, budget + 1, EVERY):
        tr.samples = s
        if tr.whole() >= target:
            return s
    return None


def looked(tr: CurveTrainer, plan: EvalPlan, s: int, force: bool = False):
    """The plan's look at grid point s, if it wants one: the whole evaluation's accuracy,
    or None (no look, or a look that stopped early)."""
    tr.samples = s
    if not plan.wants(s):
        return None
    before = len(tr.points)
    plan.look(tr, force=force)
    return tr.points[-1][1] if len(tr.points) > before else None


def sparse_crossing(tr: CurveTrainer, target: float, budget: int, params=None):
    plan = EvalPlan(target, EVERY, params or SparseParams.default())
    tr.plan = plan
    for s in range(EVERY, budget + 1, EVERY):
        acc = looked(tr, plan, s, force=s == budget)
        if acc is not None and acc >= target:
            return s, plan
    return None, plan


def saturating(rate: float, top: float = 0.95, lag: float = 0.0):
    """A concave-after-a-lag curve: top * (1 - exp(-rate * (s - lag)))."""
    return lambda s: top * (1.0 - math.exp(-rate * max(0.0, s - lag)))


def logistic(mid: float, width: float, top: float = 0.95):
    """An S curve (convex, then concave) in log samples."""
    return lambda s: top / (1.0 + math.exp(-(math.log(s) - math.log(mid)) / width))


CURVES = [
    ("fast", saturating(1 / 1500), 0.82),
    ("slow", saturating(1 / 20000), 0.71),
    ("lagged", saturating(1 / 3000, lag=2000), 0.77),
    ("s-curve", logistic(4000, 0.5), 0.83),
    ("steep s-curve", logistic(8000, 0.25), 0.88),
]


@pytest.mark.parametrize("name,curve,target", CURVES, ids=[c[0] for c in CURVES])
def test_sparse_reports_the_dense_grid_point_for_far_less_scoring(name, curve, target):
    budget = 60_000
    dense_tr, sparse_tr = CurveTrainer(curve), CurveTrainer(curve)
    want = dense_crossing(dense_tr, target, budget)
    got, plan = sparse_crossing(sparse_tr, target, budget)
    assert want is not None and got == want
    assert plan.full < want // EVERY  # fewer whole evaluations than grid points
    assert sparse_tr.scored < 0.5 * dense_tr.scored


def test_a_curve_that_never_nears_the_target_is_looked_at_geometrically():
    tr = CurveTrainer(saturating(1 / 2000, top=0.5))
    got, plan = sparse_crossing(tr, 0.9, 100_000)
    assert got is None
    # growth 1.25 from one interval: about log(100000 / 128) / log(1.25) looks, not 781
    assert plan.looks < 60 and plan.full <= 2  # the looks stop early; the end is whole


def test_a_jump_from_far_to_the_target_is_the_one_assumption():
    """Between two far looks the accuracy must not climb from below the far line to
    the target: a step in the curve inside one jump is found only at the next look,
    late, which a dense run would not be."""
    step = lambda s: 0.3 if s < 5000 else 0.95  # noqa: E731
    target = 0.9
    want = dense_crossing(CurveTrainer(step), target, 20_000)
    got, _ = sparse_crossing(CurveTrainer(step), target, 20_000)
    assert want == 5120 and got is not None and got > want


def test_secant_and_growth_bound_the_next_look():
    assert next_look(1000, EVERY, 1.25) == 1280
    assert next_look(128, EVERY, 1.25) == 256  # at least one interval ahead
    # 0.5 at 1000 after 0.3 at 500: the secant reaches 0.8 at 1750 -> grid 1792
    assert secant_look((500, 0.3), 1000, 0.5, 0.8, EVERY) == 1792
    assert secant_look((500, 0.6), 1000, 0.5, 0.8, EVERY) is None  # not rising
    assert secant_look(None, 1000, 0.5, 0.8, EVERY) is None
    assert secant_look((900, 0.3), 1000, 0.79, 0.8, EVERY) == 1152  # one interval at least


def test_plan_state_round_trips():
    tr = CurveTrainer(saturating(1 / 5000))
    plan = EvalPlan(0.8, EVERY, SparseParams.default())
    tr.plan = plan
    for s in (128, 256, 384):
        looked(tr, plan, s)
    other = EvalPlan(0.8, EVERY, SparseParams.default())
    other.load_state_dict(plan.state_dict())
    assert other.state_dict() == plan.state_dict() and other.stats() == plan.stats()
    assert [other.wants(s) for s in range(128, 4000, 128)] == [
        plan.wants(s) for s in range(128, 4000, 128)
    ]


def test_bad_schedule_and_target_are_one_line():
    with pytest.raises(UndercapError, match="use 'sparse' or 'dense'"):
        TrainSpec(
            model="small-cnn", batch_size=8, target_accuracy=0.5, eval_schedule="x"
        ).validate()
    with pytest.raises(UndercapError, match="target in"):
        EvalPlan(1.5, EVERY, SparseParams.default())


# --- whole device runs -------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits():
    from undercap.data import load_dataset

    return load_dataset("digits", input_shape=(1, 8, 8), limit=600)


def run(data, schedule, **kw):
    dev = SimulatedDevice.from_name("jetson-nano", seed=0)
    args = dict(batch_size=16, target_accuracy=0.95, max_samples=8000, eval_every_samples=32,
                freq_mhz=614.4, progress=False, eval_schedule=schedule, torch_device="cpu")  # fmt: skip
    args.update(kw)
    return train_on_device(dev, "small-cnn", data, **args)


@pytest.fixture()
def small_batches(monkeypatch):
    """Evaluation batches that let a look stop on the 150-item split: 30 items (four
    checks); the dense run scores them too."""
    monkeypatch.setattr(defaults, "TRAIN_EVAL_BATCH", 30)


def test_device_run_sparse_equals_dense_time_to_accuracy(digits, small_batches):
    dense, sparse = run(digits, "dense"), run(digits, "sparse")
    assert dense.reached and sparse.reached
    assert sparse.samples_to_target == dense.samples_to_target
    assert sparse.time_to_accuracy_s == pytest.approx(dense.time_to_accuracy_s, rel=1e-12)
    assert sparse.energy_j == pytest.approx(dense.energy_j, rel=0.02)
    # every whole evaluation sparse made is dense's value at that grid point
    dense_at = {c["samples"]: c["accuracy"] for c in dense.curve}
    assert all(dense_at[c["samples"]] == c["accuracy"] for c in sparse.curve)
    d, s = dense.evaluation, sparse.evaluation
    assert d["schedule"] == "dense" and d["full_evaluations"] == len(dense.curve)
    assert s["schedule"] == "sparse" and s["full_evaluations"] == len(sparse.curve)
    assert s["screened_items"] > 0 and s["full_evaluations"] < d["full_evaluations"]
    assert sparse.eval_time_s < dense.eval_time_s


def test_a_split_of_one_batch_is_scored_whole_at_every_look(digits):
    """At the device's batches of 512 the 150 items are one batch: no check fits, so a
    look is a whole evaluation and costs what dense's does (never more)."""
    sparse = run(digits, "sparse")
    s = sparse.evaluation
    assert s["screened_items"] == 0 and s["looks"] == s["full_evaluations"]
    assert s["full_evaluations"] == len(sparse.curve)


def test_sparse_run_killed_and_resumed_equals_the_uninterrupted(
    digits, tmp_path, monkeypatch, small_batches
):
    """The plan's state (near or far, the next look, its counts) is in the checkpoint:
    a resumed run looks at the same grid points as the uninterrupted one."""
    from undercap.train.loop import Trainer

    kw = dict(checkpoint_every_samples=40)
    full = run(digits, "sparse", **kw, checkpoint_dir=tmp_path / "full")
    step = Trainer.step

    def dying_step(self):
        if self.samples >= 240:
            raise RuntimeError("killed")
        step(self)

    monkeypatch.setattr(Trainer, "step", dying_step)
    with pytest.raises(RuntimeError, match="killed"):
        run(digits, "sparse", **kw, checkpoint_dir=tmp_path / "ck")
    monkeypatch.setattr(Trainer, "step", step)
    r = run(digits, "sparse", **kw, checkpoint_dir=tmp_path / "ck", resume=True)
    assert r.resumed_from is not None and 0 < r.resumed_from <= 240
    assert [c["samples"] for c in r.curve] == [c["samples"] for c in full.curve]
    assert r.evaluation == full.evaluation
    assert r.samples_to_target == full.samples_to_target
    assert r.eval_time_s == pytest.approx(full.eval_time_s, rel=1e-9)


def test_a_device_run_gets_a_plan_unless_dense():
    from undercap.train.loop.evalplan import plan_for

    base = dict(model="small-cnn", batch_size=16, target_accuracy=0.9, eval_every_samples=128)
    assert plan_for(TrainSpec(**base, eval_schedule="dense")) is None
    assert plan_for(TrainSpec(**{**base, "target_accuracy": None})) is None
    assert plan_for(TrainSpec(**base)).every == 128
