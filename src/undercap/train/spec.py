"""What a run trains (`TrainSpec`) and how it is kept (`RunOptions`): the two typed
values every way into training builds once and hands whole on. A device run (the CLI,
`run`, `compare`, races, `train_on_device`) gets both (train/runner.py); a loop of your
own (`capped()`, the trainer callbacks, fleet nodes) gets the TrainSpec alone, with no
model name (the model is the loop's) and the target it was given, if any
(train/setting.py).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Tuple, Union

from undercap import defaults
from undercap.errors import UndercapError
from undercap.models.recipe import Recipe, UserCode
from undercap.train.cap import NO_CAP, Cap, FixedCap, fixed_limit_w

if TYPE_CHECKING:
    from undercap.artifacts.selection import Selection
    from undercap.train.loop import LoopConfig

PathLike = Union[str, Path]

#: the fields of a selection's `training` block that are TrainSpec fields of the same
#: name (recipes/run.py writes them)
_TRAINING_KEYS = (
    "max_samples",
    "eval_every_samples",
    "eval_max_samples",
    "base_lr",
    "max_batch_size",
    "pretrained",
    "loss",
    "metric",
    "optimizer_factory",
    "lr_scheduler",
    "train_step",
    "deterministic",
)


@dataclass(frozen=True)
class _Run:
    """What every run states: the model, the batch size and the target (model and
    target None in a loop of your own: the loop holds its model and may have no
    target; a device run needs both, `validate`). A base of its own so that
    UserCode's fields (models/recipe.py), which all have defaults, can follow these:
    Python 3.8 dataclasses have no keyword-only fields."""

    model: Optional[str]
    batch_size: int
    target_accuracy: Optional[float]


@dataclass(frozen=True)
class TrainSpec(UserCode, _Run):
    """What to train and how: everything but the device, the data and how the run is
    kept (RunOptions). Built once where a run starts (`from_selection`, the CLI's
    flags, `train_on_device`'s keywords) and handed whole to the run.

    Args:
        model: Built-in model name or your factory (`path/to/file.py:build`); None in
            a loop of your own (`capped()`), whose model is its own.
        batch_size: The batch size trained with.
        target_accuracy: Test accuracy at which training stops; None in a loop of your
            own given no target (it then reports no time to accuracy).
        freq_mhz: GPU clock to lock; None: leave the clocks as they are.
        cap: The power cap the guard holds: a fixed limit (`FixedCap`,
            the default none) or a schedule, which needs a reselector.
        max_samples: Sample budget: training stops here if the target is not reached.
        eval_every_samples: Evaluate every this many training samples.
        eval_max_samples: Evaluate on at most this many test samples; None: all.
        eval_schedule: `"sparse"`: far from the target, look less often, and stop a
            look once the part of the split scored rules the target out (the same
            time to accuracy, less evaluation); `"dense"`: the whole split at every
            `eval_every_samples`.
        base_lr: Learning rate at `max_batch_size`; None: the model's.
        max_batch_size: The b_max the learning rate is scaled from by sqrt(b / b_max)
            (the estimate's largest batch); None: `batch_size`.
        weight_decay: Weight decay; None: the model's.
        pretrained: Weights file (`undercap pretrain`) to start from; None: the
            model's seeded initial weights.
        seed: Seed of the initial weights and the data order.
        guard_window_s: Shortest power window the guard judges, in seconds (widened to
            two updates of a slow sensor).
        torch_device: Where the model trains on the host: `"auto"`, `"cpu"`, `"cuda"`.
        deterministic: Deterministic torch, so that a resumed run equals the
            uninterrupted one on CUDA too (slower on CUDA).
        batch_ladder: Where the clocks are read-only: the batch sizes the guard may step
            down to over the cap (the selection's candidates); empty: halving.
        online: Re-select (b, f) at evaluations from the target's own curve (the online
            rule; off by default: it did not beat the proxies' median on the matrix).
            Needs an evaluation at least every defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES.
    """

    freq_mhz: Optional[float] = None  # None: leave the clocks as they are
    cap: Cap = NO_CAP  # the guard's limit, fixed or changing (train/cap.py)
    max_samples: int = defaults.TRAIN_MAX_SAMPLES
    eval_every_samples: int = defaults.TRAIN_EVAL_EVERY_SAMPLES
    eval_max_samples: Optional[int] = None
    eval_schedule: str = defaults.TRAIN_EVAL_SCHEDULE  # evalplan.SCHEDULES
    base_lr: Optional[float] = None  # at max_batch_size; None: the model's
    max_batch_size: Optional[int] = None  # the sqrt LR scaling's b_max; None: batch_size
    weight_decay: Optional[float] = None  # None: the model's
    pretrained: Optional[Union[str, Path]] = None
    seed: int = 0
    guard_window_s: float = defaults.GUARD_WINDOW_S
    torch_device: str = "auto"
    # deterministic torch (loop.deterministic_torch): resume exact on CUDA too, slower
    deterministic: bool = False
    # read-only clocks: the batch sizes the guard may step down to over the cap
    # (the selection's candidates; empty: halving; session.py)
    batch_ladder: Tuple[int, ...] = ()
    # the online rule (train/online.py): evaluations must come at least every
    # defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES samples while it is on
    online: bool = defaults.ONLINE

    @property
    def power_limit_w(self) -> Optional[float]:
        """The fixed limit (None: no cap, or one that changes: the follower's)."""
        return fixed_limit_w(self.cap)

    @property
    def b_max(self) -> int:
        return self.max_batch_size or self.batch_size

    def validate(self) -> None:
        """Whether undercap's own loop can run this (`undercap.train.train`)."""
        if self.model is None:
            raise UndercapError("a device run needs a model (--model, or a selection's)")
        if self.target_accuracy is None:
            raise UndercapError("--target-accuracy is required (or a selection written by `run`)")
        if self.batch_size <= 0 or self.max_samples <= 0 or self.eval_every_samples <= 0:
            raise UndercapError(
                "batch size, sample budget and evaluation interval must be positive"
            )
        if self.eval_schedule not in ("dense", "sparse"):
            raise UndercapError(
                f"evaluation schedule {self.eval_schedule!r}: use 'sparse' or 'dense'"
            )
        if self.b_max < self.batch_size:
            raise UndercapError(
                f"--max-batch-size {self.b_max} is below --batch-size {self.batch_size}; "
                "the learning rate is scaled from the largest batch (pass the largest one)"
            )
        if not 0.0 < self.target_accuracy <= 1.0:
            raise UndercapError(
                f"target accuracy {self.target_accuracy} must be a fraction in (0, 1]"
            )
        if self.online:
            from undercap.train.online import check_eval_every

            check_eval_every(self.eval_every_samples)

    @classmethod
    def from_selection(
        cls,
        selection: "Selection",
        *,
        cap: Optional[Cap] = None,
        torch_device: str = "auto",
    ) -> "TrainSpec":
        """The run a selection describes: its choice (b, the clock to lock, the cap, the
        batch sizes a read-only device steps down through) and its `training` block
        (how the run it came from trained). `cap`: a cap that changes, which the
        selection's limit was only the start of. A selection without a target accuracy
        in that block (`select --json`) cannot say when to stop: a device run needs one
        given (`validate`), a loop of your own may have none."""
        t = selection.training
        model, target = selection.model or t.get("model"), t.get("target_accuracy")
        return cls(
            model=None if model is None else str(model),
            batch_size=selection.batch_size,
            target_accuracy=None if target is None else float(target),
            freq_mhz=selection.lock_mhz(),  # None: a read-only profile's clock
            cap=FixedCap(selection.power_limit_w) if cap is None else cap,
            batch_ladder=selection.batch_ladder(),
            seed=int(t.get("seed", 0)),
            torch_device=torch_device,
            **{k: t[k] for k in _TRAINING_KEYS if t.get(k) is not None},
        )

    def lr_for(self, batch_size: int) -> float:
        """The learning rate at `batch_size`: sqrt-scaled from the largest (Sec. 4.2)."""
        from undercap.models.registry import model_spec
        from undercap.train.loop import scaled_lr

        base_lr = self.base_lr if self.base_lr is not None else model_spec(self.model).base_lr
        return scaled_lr(base_lr, batch_size, self.b_max)

    def loop_config(self) -> "LoopConfig":
        """The loop's settings, as the estimate sets them (sqrt LR scaling, Sec. 4.2)."""
        from undercap.models.registry import model_spec
        from undercap.train.loop import LoopConfig

        m = model_spec(self.model)
        return LoopConfig(
            batch_size=self.batch_size,
            lr=self.lr_for(self.batch_size),
            optimizer=m.optimizer,
            weight_decay=m.weight_decay if self.weight_decay is None else self.weight_decay,
            target_accuracy=self.target_accuracy,
            max_samples=self.max_samples,
            eval_every_samples=self.eval_every_samples,
            eval_max_samples=self.eval_max_samples,
            seed=self.seed,
            loss=self.loss,
            metric=self.metric,
            recipe=self.recipe(),
            deterministic=self.deterministic,
            eval_batch_size=defaults.TRAIN_EVAL_BATCH,
        )

    def recipe(self) -> Recipe:
        """The user's recipe at this batch size: its optimizer's own rates (or
        --lr) are the rates at b_max, sqrt-scaled as the estimate did."""
        recipe = self.recipe_at(self.base_lr, self.batch_size, self.b_max)
        recipe.validate()
        return recipe


@dataclass(frozen=True)
class RunOptions:
    """How a device run is kept and shown, apart from what it trains.

    Args:
        checkpoint_dir: Where checkpoints go; None: none (a kill loses the run).
        checkpoint_every_s: Checkpoint every this many seconds of device time.
        checkpoint_every_samples: Or every this many training samples.
        resume: Continue the run checkpointed in `checkpoint_dir`.
        sample_rate_hz: How often power is sampled.
        progress: Show a progress bar.
        eval_log: A .csv or .jsonl file that gets a row per evaluation.
        tensorboard_dir: Also write every evaluation as TensorBoard scalars here.
        time_budget_s: End the run, with an evaluation, after this much device time
            (a lane of a race: its checkpoint continues as an ordinary run).
        resume_hint: What a run stopped over its cap (exit 4) tells the user to do to
            go on from its checkpoint; `wait_hint`: one that gave up waiting for power.
    """

    checkpoint_dir: Optional[PathLike] = None
    checkpoint_every_s: Optional[float] = defaults.CHECKPOINT_EVERY_S
    checkpoint_every_samples: Optional[int] = None
    resume: bool = False
    sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ
    progress: bool = True
    eval_log: Optional[PathLike] = None
    tensorboard_dir: Optional[PathLike] = None
    time_budget_s: Optional[float] = None
    resume_hint: str = "resume it (resume=True) under a higher cap to go on from there"
    wait_hint: str = "resume it (resume=True) once power is back, or with a longer max_wait_s"

    def __post_init__(self) -> None:
        from undercap.train.evallog import check_log

        check_log(self.eval_log, self.tensorboard_dir)  # before any work, not after it
