"""One (batch size, seed) run of the efficiency estimate.

A run fine-tunes a fresh copy of the model at batch size b and the square-root-scaled
learning rate until its target accuracy, the sample budget or (reference runs) a
plateau. Its record goes into the cache (kind "estimate-run", keyed by
estimate.config.run_key) from whichever process ran it, so finished work survives a
SIGKILL of the parent and an interrupted estimate resumes.
"""

import contextlib
import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from undercap import defaults
from undercap.artifacts.cache import Cache
from undercap.data.spec import DataSpec
from undercap.errors import UndercapError
from undercap.estimate.evalsched import SparseParams, SparseStats, run_sparse
from undercap.models.recipe import Recipe
from undercap.train.loop.evalplan import LAST_CHECK, check_count

RUN_SCHEMA = "undercap.efficiency-run/1"
RUN_KIND = "estimate-run"
#: a sparse run needs a look to check at least this often before its split ends
MIN_CHECKS = 4
#: and each check at least this many items: a mean of fewer rules out almost nothing
#: (the margin of 32 items at the checks' z of ~3 is 0.27)
MIN_CHECK_ITEMS = 32
#: evaluation batches of dense runs (the reference) and of every run on a GPU, where a
#: batch is mostly fixed cost (a look's check can only come at the end of one)
EVAL_BATCH = 512
#: fold batch norm (train/loop/fold.py) only for held-out splits of at least this many
#: input elements: below, the fold costs more than it saves (benchmarks/eval_speed.py)
FOLD_MIN_EVAL_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Job:
    """Everything a worker process needs for one run (picklable)."""

    model: str
    data: DataSpec
    batch_size: int
    seed: int
    lr: float
    optimizer: str
    weight_decay: float
    target: Optional[float]  # stop at this accuracy; None: reference run over the whole budget
    max_samples: int
    eval_every_samples: int
    eval_max_samples: Optional[int]
    plateau_patience: Optional[int]  # reference runs: end after this many evals, no new best
    pretrained: Optional[str]
    init_seed: int  # seeds the model's initialisation (all of it, or the fresh head)
    cache_root: Optional[str]  # where the record goes (artifacts.cache)
    key: Dict[str, Any]  # its cache key (estimate.config.run_key)
    torch_device: str
    progress: bool
    fresh_head: bool = False  # re-initialise the head after loading (transfer to a new task)
    loss: Optional[str] = None
    metric: Optional[str] = None
    recipe: Recipe = Recipe()  # the user's optimizer, LR schedule, step (models/recipe.py)
    sparse: Optional[SparseParams] = None  # the sparse schedule's knobs; None: dense
    screen_explicit: bool = False  # the user chose screen_samples: it must fit the split
    precision: str = "fp32"  # the host's arithmetic (train/loop/precision.py)


class _Plateau(Exception):
    """Raised from the eval hook to end a reference run whose accuracy stopped rising."""


_SPLITS_CACHE: Dict[Tuple[DataSpec, str], Any] = {}


def _splits(data: DataSpec, device: str) -> Any:
    from undercap.data.spec import load_splits

    key = (data, device)
    if key not in _SPLITS_CACHE:
        _SPLITS_CACHE.clear()  # one dataset per process at a time
        _SPLITS_CACHE[key] = load_splits(data, device)
    return _SPLITS_CACHE[key]


def init_worker(threads: int, data: DataSpec, device: str) -> None:
    """Pool initializer: share the cores between workers, die with the parent (Linux
    PR_SET_PDEATHSIG, prctl(2)) so a killed estimate leaves no orphans, and load the
    data once per worker before its first run."""
    import torch

    torch.set_num_threads(threads)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    _splits(data, device)
    import undercap.models  # noqa: F401  (imported here so runs time only the training)


def run_job(job: Job) -> Dict[str, Any]:
    """Train one (b, seed) run, cache its record atomically, return the record."""
    from undercap.models.weights import initial_model
    from undercap.report.progress import sample_bar
    from undercap.train.loop import LoopConfig, Trainer

    t_load = time.perf_counter()
    splits = _splits(job.data, job.torch_device)  # cached per process
    t0 = time.perf_counter()
    # Every b at one seed starts from the same weights (init_seed: estimate._Runner).
    model, init = initial_model(
        job.model,
        splits,
        init_seed=job.init_seed,
        pretrained=job.pretrained,
        fresh_head=job.fresh_head,
    )
    sparse = _effective_sparse(job, splits)
    cfg = LoopConfig(
        batch_size=job.batch_size,
        lr=job.lr,
        optimizer=job.optimizer,
        weight_decay=job.weight_decay,
        target_accuracy=job.target,
        max_samples=job.max_samples,
        eval_every_samples=job.eval_every_samples,
        eval_max_samples=job.eval_max_samples,
        seed=job.seed,
        loss=job.loss,
        metric=job.metric,
        recipe=job.recipe,
        precision=job.precision,
        **_eval_style(job, splits, sparse),
    )
    bar = sample_bar(job.max_samples, f"b={job.batch_size} seed={job.seed}", job.progress)
    on_step, on_eval = _hooks(bar, None if sparse else job.plateau_patience)
    trainer = Trainer(model, splits, cfg, job.torch_device, on_step=on_step, on_eval=on_eval)
    try:
        result, stop, stats = _train(trainer, sparse, job)
    finally:
        bar.close()
    wall_s = time.perf_counter() - t0
    record = _record(job, result, stop, splits.accuracy_kind, init, t0 - t_load, wall_s)
    record["eval"] = _eval_record(job, sparse, stats)
    if not job.recipe.is_default:  # what the user's recipe built: its class and rates
        from undercap.train.loop.optim import describe

        record["recipe"] = describe(trainer.optimizer, job.recipe)
    return store_record(job, record)


def store_record(job: Job, record: Dict[str, Any]) -> Dict[str, Any]:
    """Keep a finished run's record in the cache (atomically), and return it."""
    entry = Cache(job.cache_root).entry(RUN_KIND, job.key)
    if entry is not None:
        entry.store_json(record)
    return record


def _eval_items(splits: Any, job: Job) -> int:
    """Held-out samples a whole evaluation scores (--eval-max-samples of the split)."""
    n_items = splits.n_test if job.eval_max_samples is None else job.eval_max_samples
    return min(n_items, splits.n_test)


def _eval_style(job: Job, splits: Any, sparse: Optional[SparseParams]) -> Dict[str, Any]:
    """How a run evaluates (LoopConfig's eval_* fields): sparse CPU runs in cache-sized
    batches that end where a look checks, channels-last, batch norm folded on large
    splits (each faster on a CPU); others in batches of 512, the model as it is."""
    if sparse is None or job.torch_device != "cpu":
        return {"eval_batch_size": EVAL_BATCH}
    elements = _eval_items(splits, job) * int(splits.x_test[:1].numel())  # a whole evaluation's
    return {
        "eval_batch_size": min(defaults.ESTIMATE_SPARSE_EVAL_BATCH, sparse.screen_samples),
        "eval_channels_last": True,
        "eval_fold_bn": elements >= FOLD_MIN_EVAL_ELEMENTS,
    }


def _effective_sparse(job: Job, splits: Any) -> Optional[SparseParams]:
    """The sparse schedule with the items between a look's checks (screen_samples) that
    fit the held-out split, or None (dense): with fewer than MIN_CHECKS checks a look
    rarely stops early and replays only add training (benchmarks/results/estimate_cost.md).
    Small splits and GPUs: docs/concepts/evaluation.md."""
    if job.sparse is None:
        return None
    n_items, every = _eval_items(splits, job), job.sparse.screen_samples
    if job.screen_explicit and every > n_items:
        raise UndercapError(
            f"--screen-samples {every} is larger than the "
            f"{n_items} held-out samples of {job.data.dataset}"
        )
    if job.torch_device != "cpu":  # no replays: far looks save evaluations at any size
        return dataclasses.replace(job.sparse, screen_samples=max(every, EVAL_BATCH))
    if check_count(n_items, every) < MIN_CHECKS and not job.screen_explicit:
        every = max(int(LAST_CHECK * n_items) // MIN_CHECKS, 1)
        if every < MIN_CHECK_ITEMS:
            return None
    if check_count(n_items, every) < MIN_CHECKS:
        return None
    return dataclasses.replace(job.sparse, screen_samples=every)


def _train(
    trainer: Any, sparse: Optional[SparseParams], job: Job
) -> Tuple[Any, str, Optional[SparseStats]]:
    """The run under its evaluation schedule: (result, why it stopped, sparse stats)."""
    if sparse is not None:
        stats = run_sparse(trainer, job.target, job.plateau_patience, sparse)
        return trainer.result(), stats.stop, stats
    try:
        result = trainer.run()
        return result, "target" if result.reached else "budget", None
    except _Plateau:
        return trainer.result(), "plateau", None


def _eval_record(
    job: Job, sparse: Optional[SparseParams], stats: Optional[SparseStats]
) -> Dict[str, Any]:
    """Which evaluation schedule made the curve, and what it evaluated (`sparse`: the
    knobs it ran with, screen_samples the items between checks)."""
    if job.sparse is not None and stats is None:
        return {
            "schedule": "dense",
            "why": f"too few checks fit the held-out split ({MIN_CHECKS} of at least "
            f"{MIN_CHECK_ITEMS} items, or of the chosen --screen-samples): dense is faster",
        }
    if stats is None or sparse is None:
        return {"schedule": "dense"}
    return {"schedule": "sparse", **dataclasses.asdict(sparse), **dataclasses.asdict(stats)}


def _hooks(bar: Any, patience: Optional[int]) -> Tuple[Any, Any]:
    """Progress, and for reference runs the plateau stop: end after `patience`
    evaluations without a new best accuracy."""
    from undercap.report.progress import training_hooks

    on_step, show_eval = training_hooks(bar)
    best = {"acc": -1.0, "since": 0}

    def on_eval(trainer: Any, point: Any) -> None:
        show_eval(trainer, point)
        if patience is None:
            return
        if point.accuracy > best["acc"]:
            best["acc"], best["since"] = point.accuracy, 0
        else:
            best["since"] += 1
            if best["since"] >= patience:
                raise _Plateau

    return on_step, on_eval


def _record(
    job: Job, result: Any, stop: str, accuracy_kind: str, init: Any, load_s: float, wall_s: float
) -> Dict[str, Any]:
    return {
        "schema": RUN_SCHEMA,
        "batch_size": job.batch_size,
        "seed": job.seed,
        "lr": job.lr,
        "target_accuracy": job.target,
        "max_samples": job.max_samples,
        "plateau_patience": job.plateau_patience,
        "stop": stop,
        "samples_to_target": result.samples_to_target,
        "samples_trained": result.samples_trained,
        "steps": result.steps,
        # a diverged run's NaN loss is not JSON
        "curve": [
            [p.samples, p.accuracy, p.loss if math.isfinite(p.loss) else None] for p in result.curve
        ],
        "accuracy_kind": accuracy_kind,
        "wall_s": wall_s,  # model set-up + training + evaluation
        "data_load_s": load_s,
        "train_wall_s": result.train_wall_s,
        "eval_wall_s": result.eval_wall_s,
        "torch_device": job.torch_device,
        "init": init,
    }


# --- reading a run's curve ------------------------------------------------------------
def curve_within(record: Dict[str, Any], budget: int) -> List[Tuple[int, float]]:
    """(samples, accuracy) points of a run up to `budget` samples."""
    return [(int(p[0]), float(p[1])) for p in record["curve"] if int(p[0]) <= budget]


def first_crossing(curve: List[Tuple[int, float]], target: float) -> Optional[int]:
    """N(b): samples at the first evaluation whose accuracy is >= target."""
    for samples, acc in curve:
        if acc >= target:
            return samples
    return None


def covers(
    record: Dict[str, Any], target: Optional[float], budget: int, patience: Optional[int]
) -> bool:
    """Whether a finished run answers a request for (target, budget) exactly as a new
    run would: training is deterministic given the work dir's fingerprint, so a run
    that reached the target within the budget, or ran at least the whole budget,
    gives the same curve prefix and the same N(b). A sparse run's curve holds only
    the points it evaluated: exact for its own target, or for any target when it was
    a reference run (it evaluates every new best, and a first crossing is one)."""
    sparse = record.get("eval", {}).get("schedule") == "sparse"
    if sparse and target is not None and record["target_accuracy"] not in (None, target):
        return False
    if target is not None and first_crossing(curve_within(record, budget), target) is not None:
        return True
    if record["stop"] == "budget" and record["samples_trained"] >= budget:
        return True
    return (
        target is None
        and record["stop"] == "plateau"
        and record.get("plateau_patience") == patience
        and record["max_samples"] >= budget
    )


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
