"""The training loop shared by efficiency estimation (server) and device training.

Both train the same pre-trained model with batch size b and a learning rate scaled
from the largest batch by sqrt(b / b_max) (paper Section 4.2, following Krizhevsky
2014 / Hoffer et al. 2017), evaluate on the test split every `eval_every_samples`
training samples, and stop at the target accuracy or the sample budget.

The loop is resumable: `state_dict()` captures model, optimizer, data order, RNG and
progress, so a killed run continues exactly: bit for bit on the CPU, and on CUDA with
`LoopConfig.deterministic` (`deterministic_torch`; docs/concepts/safety.md). Hooks let
the caller charge each step to a device; a test hook (`KILL_AFTER_SAMPLES_ENV`) kills
the process at a chosen step, whatever the machine's speed.
"""

import dataclasses
import os
import signal
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from undercap import defaults
from undercap.data.base import Splits
from undercap.models.recipe import Recipe, lr_scale
from undercap.train.loop.fold import FoldCache
from undercap.train.loop.gpu import clock_for, fast_layout, order_on
from undercap.train.loop.optim import build_scheduler, build_train_step, make_optimizer, rescale
from undercap.train.loop.precision import autocast, backward_step, grad_scaler
from undercap.train.loop.precision import resolve_torch_device as resolve_torch_device
from undercap.train.loop.repro import deterministic_torch, kill_after_samples, set_cublas_workspace
from undercap.train.loop.scoring import Scored, Stop, check_outputs, make_objective, score_until


def scaled_lr(base_lr: float, batch_size: int, max_batch_size: int) -> float:
    """Square-root learning-rate scaling from the largest batch (paper Sec. 4.2)."""
    return base_lr * lr_scale(batch_size, max_batch_size)


@dataclass(frozen=True)
class LoopConfig:
    batch_size: int
    lr: float
    optimizer: str = "adam"  # "adam" for CNNs, "adamw" for the transformer (paper Sec. 5)
    weight_decay: float = 0.0
    target_accuracy: Optional[float] = None  # None: train for the whole budget
    max_samples: int = defaults.TRAIN_MAX_SAMPLES
    eval_every_samples: int = defaults.TRAIN_EVAL_EVERY_SAMPLES
    # Evaluate on the first N test samples only; the test split must then be in random
    # order (pretrain.load_splits shuffles it: some files are stored class by class).
    eval_max_samples: Optional[int] = None
    seed: int = 0
    loss: Optional[str] = None  # import path of a user loss; None: cross-entropy
    metric: Optional[str] = None  # import path of a user metric; None: top-1 accuracy
    recipe: Recipe = Recipe()  # the user's optimizer, LR schedule, step (models/recipe.py)
    deterministic: bool = False  # deterministic_torch: a resume exact on CUDA too, slower
    # Evaluation on a CPU, faster with the same verdicts (benchmarks/eval_speed.py; sparse
    # estimates use all three, dense ones keep their cached float sums): batches of 128
    # (cache-sized activations), channels-last images, batch norm folded (fold.py)
    eval_batch_size: int = 512
    eval_channels_last: bool = False
    eval_fold_bn: bool = False
    precision: str = "fp32"  # or autocast to fp16 (with a GradScaler) or bf16: precision.py


@dataclass(frozen=True)
class EvalPoint:
    samples: int
    accuracy: float
    loss: float


@dataclass(frozen=True)
class LoopResult:
    reached: bool
    samples_to_target: Optional[int]  # samples trained when the target was first met
    samples_trained: int
    steps: int
    final_accuracy: float
    curve: Tuple[EvalPoint, ...]
    train_wall_s: float  # host seconds spent in training steps
    eval_wall_s: float  # host seconds spent evaluating (not charged to training)


@dataclass
class Trainer:
    """One training run to a target accuracy. Call `run()`; it may be resumed from
    `state_dict()` with `load_state_dict()` before `run()`."""

    model: nn.Module
    data: Splits
    cfg: LoopConfig
    torch_device: Union[torch.device, str] = "cpu"
    #: called after every optimizer step with (trainer, step_batch_size); may raise to stop
    on_step: "Optional[Callable[[Trainer, int], None]]" = None
    #: called after every evaluation with (trainer, point)
    on_eval: "Optional[Callable[[Trainer, EvalPoint], None]]" = None
    samples: int = 0
    steps: int = 0
    curve: List[EvalPoint] = field(default_factory=list)
    samples_to_target: Optional[int] = None
    train_wall_s: float = 0.0
    eval_wall_s: float = 0.0
    #: which grid points are evaluated, and how (evalplan.EvalPlan); None: dense
    plan: Any = None

    def __post_init__(self) -> None:
        if self.cfg.deterministic:
            set_cublas_workspace()  # before this trainer's first CUDA computation
        self._kill_after = kill_after_samples()  # the test hook, read once
        self.model.to(self.torch_device)
        self.objective = make_objective(self.cfg.loss, self.cfg.metric)
        if self.cfg.loss is None:  # the default loss needs logits that fit the labels
            check_outputs(
                self.model,
                self.data.x_train[:2].to(self.torch_device),
                self.data.y_train[:2],
                self.data.num_classes,
            )
        recipe, cfg = self.cfg.recipe, self.cfg  # the user's parts where given (None: ours)
        self.optimizer = make_optimizer(self.model, cfg)
        self.scheduler = build_scheduler(
            self.optimizer, recipe, cfg.batch_size, self.data.n_train, cfg.max_samples
        )
        self._user_step = None if recipe.train_step is None else build_train_step(recipe.train_step)
        self.scaler = grad_scaler(self.cfg.precision, self.torch_device)
        self._gen = torch.Generator().manual_seed(self.cfg.seed)
        self._perm = self._new_order()
        self._clock = clock_for(self.torch_device)  # a GPU's own times (loop/gpu.py)
        self._channels_last = fast_layout(
            self.model, self.data.x_train[:1], self.torch_device, self.cfg.deterministic
        )
        self._pos = 0
        torch.manual_seed(self.cfg.seed)  # dropout etc.
        n_eval = self.cfg.eval_max_samples  # None: the whole split
        x_eval, y_eval = self.data.x_test[:n_eval], self.data.y_test[:n_eval]
        if self.cfg.eval_channels_last and x_eval.dim() == 4 and x_eval.is_floating_point():
            x_eval = x_eval.contiguous(memory_format=torch.channels_last)
        self._x_eval, self._y_eval = x_eval, y_eval
        self._fold = FoldCache() if self.cfg.eval_fold_bn else None

    def set_batch_size(self, batch_size: int, lr: float) -> None:
        """Continue at another batch size and rate (a power cap changed), keeping the
        model, the optimizer's state and the data order; a user's optimizer keeps its own
        rates, re-scaled by the same sqrt rule."""
        old_lr = self.cfg.lr
        self.cfg = dataclasses.replace(self.cfg, batch_size=int(batch_size), lr=float(lr))
        if self.cfg.recipe.optimizer is not None:
            rescale(self.optimizer, self.scheduler, float(lr) / old_lr)
            return
        for group in self.optimizer.param_groups:
            group["lr"] = float(lr)

    # --- data order ---------------------------------------------------------------
    def _new_order(self) -> torch.Tensor:
        """The next epoch's order of the training items, on the data's device."""
        return order_on(torch.randperm(self.data.n_train, generator=self._gen), self.data)

    def _next_indices(self) -> torch.Tensor:
        """The next batch of a seeded reshuffle-every-epoch order, always a full one (an
        epoch's tail is topped up from the next permutation)."""
        b = self.cfg.batch_size
        if self._pos + b <= self.data.n_train:  # the common case: one slice, no copy
            self._pos += b
            return self._perm[self._pos - b : self._pos]
        parts, need = [], b
        while need > 0:
            if self._pos >= self.data.n_train:
                self._perm = self._new_order()
                self._pos = 0
            take = self._perm[self._pos : self._pos + need]
            self._pos += int(take.numel())
            need -= int(take.numel())
            parts.append(take)
        return torch.cat(parts)

    # --- one step / one evaluation -----------------------------------------------------
    def step(self) -> None:
        idx = self._next_indices()
        x = self.data.x_train[idx].to(self.torch_device, non_blocking=True)
        y = self.data.y_train[idx].to(self.torch_device, non_blocking=True)
        if self._channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with self._clock.span(self, "train_wall_s"):
            self._train_step(x, y)
        self.samples += int(idx.numel())
        self.steps += 1
        if self.on_step is not None:
            self.on_step(self, int(idx.numel()))

    def _train_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.model.train()
        if self._user_step is not None:  # your step runs under autocast; fp16's scaling is yours
            with autocast(self.cfg.precision, self.torch_device):
                self._user_step(self.model, x, y, self.optimizer, self.objective.loss)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            with autocast(self.cfg.precision, self.torch_device):
                loss = self.objective.loss(self.model(x), y)
            backward_step(loss, self.optimizer, self.scaler)
        if self.scheduler is not None:
            self.scheduler.step()

    def _score(self, stop: Optional[Stop] = None) -> Scored:
        """The held-out items scored until `stop`, charged to eval_wall_s."""
        model = self.model if self._fold is None else self._fold.model_at(self.model, self.steps)
        with self._clock.span(self, "eval_wall_s"), autocast(self.cfg.precision, self.torch_device):
            done = score_until(
                model,
                self._x_eval,
                self._y_eval,
                objective=self.objective,
                batch_size=self.cfg.eval_batch_size,
                device=self.torch_device,
                stop=stop,
            )
        self._clock.settle(self)  # the evaluation read its sums: the GPU is done
        return done

    def evaluate(self) -> EvalPoint:
        return self._point(self._score())

    def sequential(self, stop: Stop) -> Tuple[Optional[EvalPoint], Scored]:
        """The split in its batches until `stop` rules the target out (no curve point:
        None), else the whole split's point, as evaluate()'s; and what it scored."""
        done = self._score(stop)
        return (self._point(done) if done.complete else None), done

    def _point(self, done: Scored) -> EvalPoint:
        acc = done.metric
        point = EvalPoint(samples=self.samples, accuracy=acc, loss=done.loss)
        self.curve.append(point)
        if self.plan is not None:  # before on_eval, whose checkpoint holds the plan
            self.plan.evaluated(self.samples, acc)
        target = self.cfg.target_accuracy
        if self.samples_to_target is None and target is not None and acc >= target:
            self.samples_to_target = self.samples
        if self.on_eval is not None:
            self.on_eval(self, point)
        return point

    @property
    def eval_items(self) -> int:
        """Held-out items a whole evaluation scores."""
        return int(self._y_eval.shape[0])

    def reorder_eval(self, order: torch.Tensor) -> None:
        """Score the held-out split in `order` from now on (a sparse plan's sequential
        looks read it in a random order; a whole evaluation's metric is the same)."""
        self._x_eval, self._y_eval = self._x_eval[order], self._y_eval[order]

    @property
    def done(self) -> bool:
        return self.samples_to_target is not None or self.samples >= self.cfg.max_samples

    def eval_due(self, samples_before: int) -> bool:
        """Whether run() evaluates after the step from `samples_before` to `self.samples`:
        at every multiple of `eval_every_samples` crossed (N(b)'s resolution) and at the
        end of the budget. The one statement of the rule, which step hooks ask too."""
        every = self.cfg.eval_every_samples
        crossed = self.samples // every > samples_before // every
        if self.plan is not None:  # a sparse plan looks at some grid points only
            crossed = crossed and self.plan.wants(self.samples)
        return crossed or self.samples >= self.cfg.max_samples

    def look(self) -> None:
        """A due grid point: the whole split, or the plan's sequential look (the end of
        the budget is always scored whole)."""
        if self.plan is None:
            self.evaluate()
        else:
            self.plan.look(self, force=self.samples >= self.cfg.max_samples)

    def run(self) -> LoopResult:
        """Train until the target or the budget, evaluating where `eval_due` says."""
        with deterministic_torch(self.cfg.deterministic):
            while not self.done:
                before = self.samples
                self.step()
                if self.eval_due(before):
                    self.look()
                self._test_kill()
        return self.result()

    def _test_kill(self) -> None:
        """The test hook (KILL_AFTER_SAMPLES_ENV): die after the step's hooks, so every
        checkpoint due is on disk and the work since is lost, as in a power loss."""
        if self._kill_after is not None and self.samples >= self._kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    def evaluation(self) -> Dict[str, Any]:
        """What the run evaluated (a result's record): its plan's counts, or dense's."""
        if self.plan is not None:
            return self.plan.stats()
        n = len(self.curve)
        return {"schedule": "dense", "looks": n, "full_evaluations": n, "screened_items": 0}

    def result(self) -> LoopResult:
        self._clock.settle(self)
        return LoopResult(
            reached=self.samples_to_target is not None,
            samples_to_target=self.samples_to_target,
            samples_trained=self.samples,
            steps=self.steps,
            final_accuracy=self.curve[-1].accuracy if self.curve else float("nan"),
            curve=tuple(self.curve),
            train_wall_s=self.train_wall_s,
            eval_wall_s=self.eval_wall_s,
        )

    # --- checkpointing -------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "gen": self._gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            # dropout on a GPU draws from CUDA's generators, not the CPU one
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "perm": self._perm.cpu(),
            "pos": self._pos,
            "samples": self.samples,
            "steps": self.steps,
            "batch_size": self.cfg.batch_size,
            "lr": self.cfg.lr,
            "curve": [(p.samples, p.accuracy, p.loss) for p in self.curve],
            "samples_to_target": self.samples_to_target,
            "train_wall_s": self.train_wall_s,
            "eval_wall_s": self.eval_wall_s,
            "plan": None if self.plan is None else self.plan.state_dict(),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self._gen.set_state(state["gen"])
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self._perm = order_on(state["perm"], self.data)
        self._pos = int(state["pos"])
        self.samples = int(state["samples"])
        self.steps = int(state["steps"])
        if self._fold is not None:  # new weights at an old step count
            self._fold.clear()
        if "batch_size" in state:  # a schedule may have switched it before the checkpoint
            b, lr = int(state["batch_size"]), float(state["lr"])
            if self.cfg.recipe.optimizer is None:
                self.set_batch_size(b, lr)
            else:  # the user's optimizer came back with its rates as they were
                self.cfg = dataclasses.replace(self.cfg, batch_size=b, lr=lr)
        self.curve = [EvalPoint(int(s), float(a), float(loss)) for s, a, loss in state["curve"]]
        self.samples_to_target = state["samples_to_target"]
        self.train_wall_s = float(state["train_wall_s"])
        self.eval_wall_s = float(state["eval_wall_s"])
        if self.plan is not None and state.get("plan") is not None:
            self.plan.load_state_dict(state["plan"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
