"""How a run trains (`Plan`), what a device run trains at (`TrainSpec`: the plan and
the choice) and how it is kept (`RunOptions`).

The plan is made once (by `run`, written into the selection as its `training` block;
by `train` from its flags and the selection; by `capped()`, with no model name) and
crosses the stages whole: `Plan.from_selection` reads it back, a TrainSpec *is* it plus
the device's choice, and the loop's settings are made from it (`loop_config`) exactly
as the r(b) estimate's are, so N(b) on the proxy and the device run are one procedure
(paper Sec. 4.2).
"""

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple, Union

from undercap import defaults
from undercap.artifacts.profile import as_profile
from undercap.artifacts.selection import Selection, load_selection
from undercap.errors import UndercapError
from undercap.models.recipe import Recipe, UserCode
from undercap.models.registry import model_spec
from undercap.select import choose, per_batch
from undercap.select.pooling import proxies_relative
from undercap.train.cap import NO_CAP, Cap, FixedCap, cap_from, fixed_limit_w
from undercap.train.evallog import check_log

if TYPE_CHECKING:
    from undercap.train.loop import LoopConfig
    from undercap.train.session.follow import Reselector

PathLike = Union[str, Path]

#: the selection's `training` block (on disk) is the plan's fields but these, which
#: the selection holds at its top level or does not keep
_NOT_IN_BLOCK = ("batch_size",)


@dataclass(frozen=True)
class _Run:
    """What every plan states (model and target None in a loop of your own). A base of
    its own so that UserCode's fields (models/recipe.py), which all have defaults, can
    follow these: Python 3.8 dataclasses have no keyword-only fields."""

    model: Optional[str]
    batch_size: int
    target_accuracy: Optional[float]


@dataclass(frozen=True)
class Plan(UserCode, _Run):
    """How a run trains: made once, read back whole from the selection's `training`
    block (`from_selection`); the loop is set from it as the r(b) estimate is (Sec. 4.2).

    Args:
        model: Built-in model name or your factory (`path/to/file.py:build`); None in
            a loop of your own (`capped()`), whose model is its own.
        batch_size: The batch size trained with.
        target_accuracy: Test accuracy at which training stops; None in a loop of your
            own given no target (it then reports no time to accuracy).
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
        deterministic: Deterministic torch, so that a resumed run equals the
            uninterrupted one on CUDA too (slower on CUDA).
        data: The data the plan was made for (a DataSpec's key), where it is known:
            `train --from-selection` loads it when no `--dataset` is given.
        precision: The arithmetic to train in: `"fp32"`, or mixed precision in
            `"fp16"` (with loss scaling) or `"bf16"`.
    """

    max_samples: int = defaults.TRAIN_MAX_SAMPLES
    eval_every_samples: int = defaults.TRAIN_EVAL_EVERY_SAMPLES
    eval_max_samples: Optional[int] = None
    eval_schedule: str = defaults.TRAIN_EVAL_SCHEDULE  # loop/evalplan.SCHEDULES
    base_lr: Optional[float] = None  # at max_batch_size; None: the model's
    max_batch_size: Optional[int] = None  # the sqrt LR scaling's b_max; None: batch_size
    weight_decay: Optional[float] = None  # None: the model's
    pretrained: Optional[PathLike] = None
    seed: int = 0
    deterministic: bool = False
    data: Optional[Dict[str, Any]] = dataclasses.field(default=None, hash=False)
    precision: str = defaults.PRECISION

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
        if self.precision not in defaults.PRECISIONS:
            raise UndercapError(
                f"precision {self.precision!r}: use {', '.join(defaults.PRECISIONS)}"
            )

    def to_dict(self) -> Dict[str, Any]:
        """The selection's `training` block: every field but the batch size (the
        selection's own), the unset ones left out."""
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(Plan)
            if f.name not in _NOT_IN_BLOCK and getattr(self, f.name) is not None
        }
        if out.get("pretrained") is not None:
            out["pretrained"] = str(out["pretrained"])
        return out

    @classmethod
    def from_selection(cls, selection: Selection) -> "Plan":
        """The plan a selection carries: its batch size and model, and its `training`
        block (all of it from `run`; the estimate's b_max, base LR and weights from
        `select --json`, whose plan has no target: a device run needs one given)."""
        names = {f.name for f in dataclasses.fields(Plan)} - set(_NOT_IN_BLOCK) - {"model"}
        given = {k: v for k, v in selection.training.items() if k in names and v is not None}
        model = selection.model or selection.training.get("model")
        target = given.pop("target_accuracy", None)
        given["precision"] = selection.precision  # the choice's, at the selection's top
        return Plan(
            model=None if model is None else str(model),
            batch_size=selection.batch_size,
            target_accuracy=None if target is None else float(target),
            **given,
        )

    def lr_for(self, batch_size: int) -> float:
        """The learning rate at `batch_size`: sqrt-scaled from the largest (Sec. 4.2)."""
        from undercap.train.loop import scaled_lr

        base_lr = self.base_lr if self.base_lr is not None else model_spec(self.model).base_lr
        return scaled_lr(base_lr, batch_size, self.b_max)

    def loop_config(self, host_precision: Optional[str] = None) -> "LoopConfig":
        """The loop's settings, as the estimate sets them (sqrt LR scaling, Sec. 4.2);
        `host_precision`: what the host trains in where it stands in for the device's
        (train/loop/precision.host_precision)."""
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
            precision=host_precision or self.precision,
        )

    def recipe(self) -> Recipe:
        """The user's recipe at this batch size: its optimizer's own rates (or
        --lr) are the rates at b_max, sqrt-scaled as the estimate did."""
        recipe = self.recipe_at(self.base_lr, self.batch_size, self.b_max)
        recipe.validate()
        return recipe


@dataclass(frozen=True)
class TrainSpec(Plan):
    """What a device run trains at: its plan (the fields of `Plan`) and the device's
    choice. Built once where a run starts (`from_selection`, the CLI's flags,
    `train_on_device`'s keywords, `capped()`) and handed whole to the run.

    Args:
        freq_mhz: GPU clock to lock; None: leave the clocks as they are.
        cap: The power cap the guard holds (`undercap.train.cap`): a fixed limit
            (`FixedCap`, the default none), a schedule or a live source, which
            re-select (b, f) at every change (they need a profile and r(b)).
        guard_window_s: Shortest power window the guard judges, in seconds (widened to
            two updates of a slow sensor).
        torch_device: Where the model trains on the host: `"auto"`, `"cpu"`, `"cuda"`.
        batch_ladder: Where the clocks are read-only: the batch sizes the guard may step
            down to over the cap (the selection's candidates); empty: halving.
    """

    freq_mhz: Optional[float] = None  # None: leave the clocks as they are
    cap: Cap = NO_CAP
    guard_window_s: float = defaults.GUARD_WINDOW_S
    torch_device: str = "auto"
    batch_ladder: Tuple[int, ...] = ()

    @property
    def plan(self) -> Plan:
        """The plan alone (what the selection writes and the loop is made from)."""
        return Plan(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Plan)})

    @classmethod
    def from_selection(  # type: ignore[override]
        cls, selection: Selection, *, cap: Optional[Cap] = None, torch_device: str = "auto"
    ) -> "TrainSpec":
        """The run a selection describes: its plan (how the run it came from trained)
        and its choice (b, the clock to lock, the cap, the batch sizes a read-only
        device steps down through). `cap`: the run's own, e.g. a cap that changes, which
        the selection's limit was only the start of (None: the selection's limit)."""
        plan = Plan.from_selection(selection)
        return cls.of(
            plan,
            freq_mhz=selection.lock_mhz(),  # None: a read-only profile's clock
            cap=FixedCap(selection.power_limit_w) if cap is None else cap,
            batch_ladder=selection.batch_ladder(),
            torch_device=torch_device,
        )

    @classmethod
    def of(cls, plan: Plan, **choice: Any) -> "TrainSpec":
        """`plan` trained at the device's `choice` (TrainSpec's own fields)."""
        return cls(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(Plan)}, **choice)


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
    resume_hint: str = "resume it (resume=True) under a higher cap to go on from there"
    wait_hint: str = "resume it (resume=True) once power is back, or with a longer max_wait_s"

    def __post_init__(self) -> None:
        check_log(self.eval_log, self.tensorboard_dir)  # before any work, not after it


# --- what a loop of your own runs at (capped(), the trainer callbacks, fleet nodes) ---
def chosen(
    selection: Union[Selection, TrainSpec, str, Path, None],
    *,
    batch_size: Optional[int] = None,
    max_batch_size: Optional[int] = None,
    freq_mhz: Optional[float] = None,
    power_limit_w: Optional[float] = None,
    profile: Any = None,
    relative: Optional[Mapping[int, float]] = None,
    proxies: Any = None,
    target_accuracy: Optional[float] = None,
    guard_window_s: float = defaults.GUARD_WINDOW_S,
    objective: str = "time",
    energy_budget_j: Optional[float] = None,
    samples_bmax: Optional[float] = None,
    power_schedule: Any = None,
    precision: Optional[str] = None,
) -> "Tuple[TrainSpec, Optional[Reselector]]":
    """What `capped()` (and a trainer callback, before its trainer is built) runs at,
    with no model (the loop's), and what re-selects for a cap that changes: a TrainSpec
    as it is, a selection's (its limit where no cap is given), the objective's choice in
    `precision` (None: the profile's), or `batch_size` and `freq_mhz` as given.
    `precision` is what the loop trains in; a selection made for another is trained as
    it is, with a warning."""
    from undercap.train.session.follow import reselector_from

    obj = {"objective": objective, "energy_budget_j": energy_budget_j, "samples_bmax": samples_bmax}
    if proxies is not None:  # the ensemble rule: Algorithm 1 on the proxies' median r(b)
        relative = median_relative(proxies, relative)
    cap = cap_from(power_limit_w, power_schedule)
    mine = {"model": None, "target_accuracy": target_accuracy, "guard_window_s": guard_window_s}
    if isinstance(selection, TrainSpec):
        spec = _as_given(selection, cap, batch_size, freq_mhz, max_batch_size, target_accuracy)
    elif selection is not None:
        sel = selection if isinstance(selection, Selection) else load_selection(selection)
        spec = TrainSpec.from_selection(sel, cap=None if cap == NO_CAP else cap)
        warn_precision(spec.precision, precision)
        spec = dataclasses.replace(spec, **mine)
    elif profile is not None and relative is not None:
        spec = _chosen(cap, as_profile(profile), relative, {**obj, "precision": precision}, mine)
    elif batch_size is None:
        raise UndercapError(
            "capped() needs a selection, or a profile and r(b) (relative=) with a power "
            "limit, or a batch_size"
        )
    else:
        spec = TrainSpec(
            batch_size=batch_size,
            freq_mhz=freq_mhz,
            cap=cap,
            max_batch_size=max_batch_size,
            precision=precision or defaults.PRECISION,
            **mine,
        )
    return spec, reselector_from(spec.cap, profile, relative, obj, spec.precision)


def _as_given(spec: TrainSpec, cap: Cap, *keywords: Any) -> TrainSpec:
    if cap != NO_CAP or any(k is not None for k in keywords):
        raise UndercapError(
            "capped(): a TrainSpec states the batch size, clock, cap and target; "
            "give them in it, not as keywords too"
        )
    return spec


def warn_precision(chosen: str, trained: Optional[str], loop: str = "the loop") -> None:
    """One warning line where the loop trains in another precision than was chosen for."""
    if trained is not None and trained != chosen:
        print(
            f"warning: the selection is for {chosen}, but {loop} trains in {trained}: its "
            f"times and power were measured in {chosen}; select again in {trained}",
            file=sys.stderr,
        )


def _chosen(
    cap: Cap, prof: Any, relative: Mapping[int, float], objective: Mapping[str, Any], mine: Any
) -> TrainSpec:
    """Algorithm 1's (or the objective's) choice under the cap's first limit."""
    limit_w = fixed_limit_w(cap)  # a cap that changes: its follower chooses at the start
    choice = choose(prof, relative, limit_w, **objective)
    ladder = tuple(
        c.batch_size for c in per_batch(prof.in_precision(choice.precision), relative, limit_w)
    )
    return TrainSpec(
        batch_size=choice.batch_size,
        freq_mhz=choice.freq_mhz if prof.clock == "chosen" else None,
        cap=cap,
        max_batch_size=max(relative),
        batch_ladder=ladder,
        precision=choice.precision,
        **mine,
    )


def median_relative(proxies: Any, relative: Any) -> Dict[int, float]:
    """The median r(b) of several proxies (select/pooling.py); not with `relative`."""
    if relative is not None:
        raise UndercapError("capped(): give relative= (one proxy) or proxies=, not both")
    return proxies_relative(proxies)
