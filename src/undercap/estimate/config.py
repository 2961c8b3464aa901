"""What an estimate of r(b) is asked for (`EstimateConfig`), and what determines
each of its runs' trajectory (`run_key`, the cache key of a run)."""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from undercap import defaults
from undercap.artifacts.io import file_sha256
from undercap.data.spec import DataSpec
from undercap.errors import UndercapError
from undercap.estimate.evalsched import SCHEDULES, SparseParams
from undercap.models.recipe import Recipe, UserCode
from undercap.models.registry import model_spec
from undercap.models.user import code_digest


@dataclass(frozen=True)
class _Estimated:
    """What an estimate cannot do without: the model, the proxy and the batch sizes. A
    base of its own so that UserCode's fields (models/recipe.py), which all have
    defaults, can follow these: Python 3.8 dataclasses have no keyword-only fields."""

    model: str
    data: DataSpec
    batch_sizes: Tuple[int, ...]


@dataclass(frozen=True)
class EstimateConfig(UserCode, _Estimated):
    """What `undercap estimate` measures: N(b), the samples each batch size needs to
    reach the target accuracy on a proxy dataset, for every batch size and seed, with
    the learning rate scaled by sqrt(b / b_max) from the largest batch.

    Args:
        model: Built-in model name or your factory (`path/to/file.py:build`).
        data: The proxy dataset.
        batch_sizes: Batch sizes to estimate; the largest is b_max, the reference.
        seeds: Seeds; each (b, seed) is one training run.
        target_accuracy: Absolute target test accuracy, or ...
        target_fraction: ... this fraction of the best accuracy b_max reaches within
            the budget. Both: the lower of the two (a slice of the target's data,
            which may not reach the device run's target).
        max_samples: Sample budget of every run.
        eval_every_samples: Evaluate every this many training samples (N(b)'s step).
        eval_max_samples: Evaluate on at most this many test samples; None: all.
        lr: Learning rate at b_max; None: the model's.
        weight_decay: Weight decay; None: the model's (0 for Adam, 0.01 for AdamW).
        pretrained: Weights file (`undercap pretrain`) every run starts from; None: a
            seeded random init, the same for every run.
        init_seed: Seed of that random init.
        fresh_head: Re-initialise the classifier head after loading `pretrained`.
        plateau_patience: With `target_fraction`: end b_max's reference runs after this
            many evaluations without a new best; None: run the whole budget.
        eval_schedule: "sparse": the same N(b) as "dense" for a fraction of the
            evaluations (docs/concepts/evaluation.md); the curve holds only the points
            evaluated whole. "dense": the whole held-out split at every grid point
            (every curve point, for studies that replay curves).
        screen_samples: Sparse: a look checks its verdict every this many held-out
            samples; None: defaults.ESTIMATE_CHECK_SAMPLES (128).
        precision: `"fp32"`, or mixed precision in `"fp16"` or `"bf16"` (on a CPU, fp16
            runs as bf16: the same width, many times faster there).
    """

    seeds: Tuple[int, ...] = tuple(range(defaults.ESTIMATE_SEEDS))
    target_accuracy: Optional[float] = None
    target_fraction: Optional[float] = None
    max_samples: int = defaults.ESTIMATE_MAX_SAMPLES
    eval_every_samples: int = defaults.ESTIMATE_EVAL_EVERY_SAMPLES
    eval_max_samples: Optional[int] = None
    lr: Optional[float] = None
    weight_decay: Optional[float] = None
    pretrained: Optional[str] = None
    init_seed: int = 0
    fresh_head: bool = False
    plateau_patience: Optional[int] = None
    eval_schedule: str = defaults.ESTIMATE_EVAL_SCHEDULE
    screen_samples: Optional[int] = None
    precision: str = defaults.PRECISION

    @property
    def b_max(self) -> int:
        return max(self.batch_sizes)

    def validate(self) -> None:
        if self.target_accuracy is None and self.target_fraction is None:
            raise UndercapError("give --target-accuracy or --target-fraction")
        for t in (self.target_accuracy, self.target_fraction):
            if t is not None and not 0.0 < t <= 1.0:
                raise UndercapError(f"target {t} must be a fraction in (0, 1], e.g. 0.9")
        if not self.batch_sizes or len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise UndercapError(f"batch sizes {list(self.batch_sizes)} must be distinct, >= 1")
        if min(self.batch_sizes) < 1:
            raise UndercapError("batch sizes must be positive integers")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UndercapError(f"seeds {list(self.seeds)} must be a non-empty distinct list")
        if self.max_samples < self.b_max:
            raise UndercapError(
                f"--max-samples {self.max_samples} is below the largest batch size {self.b_max}"
            )
        if self.fresh_head and self.pretrained is None:
            raise UndercapError("--fresh-head needs --pretrained weights")
        if self.eval_every_samples < 1:
            raise UndercapError("--eval-every must be a positive number of samples")
        if self.precision not in defaults.PRECISIONS:
            raise UndercapError(f"--precision {self.precision!r}: use fp32, fp16 or bf16")
        if self.eval_every_samples > self.max_samples:
            raise UndercapError(
                f"--eval-every {self.eval_every_samples} is coarser than the sample budget "
                f"--max-samples {self.max_samples}: N(b) would be one evaluation at the end"
            )
        if self.eval_schedule not in SCHEDULES:
            raise UndercapError(f"--eval-schedule {self.eval_schedule!r}: use dense or sparse")
        if self.screen_samples is not None and self.screen_samples < 1:
            raise UndercapError("--screen-samples must be a positive number of samples")
        if self.screen_samples is not None and self.eval_schedule == "dense":
            raise UndercapError(
                "--screen-samples spaces a sparse look's checks; --eval-schedule dense "
                "evaluates the whole split at every point (drop one of the two)"
            )
        subset, split = self.screen_samples, self.eval_max_samples
        if subset is not None and split is not None and subset > split:
            raise UndercapError(
                f"--screen-samples {subset} is larger than the {split} held-out "
                "samples evaluated (--eval-max-samples)"
            )
        self.recipe_for(self.b_max).validate()

    def sparse_params(self, torch_device: str) -> SparseParams:
        """The sparse schedule's knobs; far jumps replay from a checkpoint only where
        training is bit-for-bit repeatable (the CPU), elsewhere they are a device run's
        far looks, which never go back."""
        every = self.screen_samples or defaults.ESTIMATE_CHECK_SAMPLES
        return SparseParams.default(screen_samples=every, replay=torch_device == "cpu")

    def recipe_for(self, batch_size: int) -> Recipe:
        """The user's recipe for a run at `batch_size` (--lr: the rate at b_max)."""
        return self.recipe_at(self.lr, batch_size, self.b_max)

    @property
    def base_lr(self) -> float:
        return self.lr if self.lr is not None else model_spec(self.model).base_lr

    @property
    def optimizer(self) -> str:
        """The registry's optimizer name, or the user's factory (its import path)."""
        return self.optimizer_factory or model_spec(self.model).optimizer

    @property
    def weight_decay_used(self) -> float:
        wd = self.weight_decay
        return model_spec(self.model).weight_decay if wd is None else float(wd)


def fingerprint(cfg: EstimateConfig) -> Dict[str, Any]:
    """What determines every run's trajectory. Targets, budgets, the batch-size list
    and seeds are not in it: runs are reused per request (estimate.runs.covers),
    so an estimate may grow by seeds or batch sizes; b_max is, as it sets every LR."""
    recipe = (cfg.optimizer_factory, cfg.lr_scheduler, cfg.train_step)
    fp = {
        "model": cfg.model,
        "dataset": cfg.data.dataset,
        "input_shape": list(cfg.data.input_shape) if cfg.data.input_shape else None,
        "context": cfg.data.context,
        "limit": cfg.data.limit,
        "data_seed": cfg.data.seed,
        "split": cfg.data.split,
        "test_order": "seeded-shuffle",  # pretrain.load_splits; older work dirs used file order
        "b_max": cfg.b_max,
        "base_lr": cfg.base_lr,
        "optimizer": cfg.optimizer,
        "weight_decay": cfg.weight_decay_used,
        "eval_every_samples": cfg.eval_every_samples,
        "eval_max_samples": cfg.eval_max_samples,
        "pretrained_sha256": file_sha256(cfg.pretrained, what="weights file")
        if cfg.pretrained
        else None,
        "init_seed": None if cfg.pretrained else cfg.init_seed,
        "fresh_head": cfg.fresh_head,
        "loss": cfg.loss,
        "metric": cfg.metric,
        # users' models, data, losses, metrics, recipes: their source, so edits redo runs
        "user_code": code_digest(cfg.model, cfg.data.dataset, cfg.loss, cfg.metric, *recipe),
    }
    if any(recipe):  # only then, so the keys of every earlier run stay as they were
        fp.update(cfg.recipe_paths, base_lr=cfg.lr)  # base_lr None: the factory's own rate
    if cfg.eval_schedule != "dense":  # likewise: dense runs keep their keys
        fp.update(eval_schedule=cfg.eval_schedule, screen_samples=cfg.screen_samples)
    if cfg.precision != "fp32":  # likewise: fp32 runs keep theirs; mixed precision's apart
        fp["precision"] = cfg.precision
    if cfg.data.slice_fraction is not None:  # a slice of the data is other data
        fp.update(slice_fraction=cfg.data.slice_fraction, slice_seed=cfg.data.slice_seed)
    return fp


def run_key(fp: Dict[str, Any], batch_size: int, seed: int) -> Dict[str, Any]:
    """The cache key of one (b, seed) run of an estimate with fingerprint `fp`."""
    return {**fp, "batch_size": int(batch_size), "seed": int(seed)}
