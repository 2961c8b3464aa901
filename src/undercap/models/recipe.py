"""A user's own training recipe, by import path: optimizer, LR schedule, training step.

Built-in models train with the registry's optimizer (Adam or AdamW, registry.py) at a
base LR sqrt-scaled from the largest batch (paper Sec. 4.2). A user's own recipe
(`--optimizer`, `--lr-scheduler`, `--train-step`) then trains every run of the estimate
and the device run, so r(b) is measured with the recipe the job really uses; a user's
base LR (the factory's own, or `--lr`) is the rate at the largest batch too. What each
factory is called with: docs/guides/own-code.md (train/loop/optim.py builds them).

Torch-free: this is what configurations, cache keys and artifacts hold.
"""

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Optional

from undercap.models.user import split


@dataclass(frozen=True)
class UserCode:
    """The user's own code, by import path, that every training run of a job uses (so
    r(b) is measured with it); EstimateConfig, TrainingSetup and TrainSpec inherit it.

    Args:
        loss: Import path of your loss `fn(outputs, labels)`; None: cross-entropy.
        metric: Import path of your metric `fn(outputs, labels)`, higher is better;
            None: top-1 accuracy.
        optimizer_factory: Import path of your optimizer factory
            `factory(params=, model=, lr=)`; None: the model's Adam or AdamW.
        lr_scheduler: Import path of your scheduler factory
            `factory(optimizer=, steps_per_epoch=, max_steps=)`.
        train_step: Import path of your training step
            `fn(model=, x=, y=, optimizer=, loss_fn=)`.
    """

    loss: Optional[str] = None
    metric: Optional[str] = None
    optimizer_factory: Optional[str] = None
    lr_scheduler: Optional[str] = None
    train_step: Optional[str] = None

    @property
    def user_code(self) -> "UserCode":
        """These five fields alone (of a settings class that inherits them)."""
        return UserCode(**{f.name: getattr(self, f.name) for f in fields(UserCode)})

    def recipe_at(self, base_lr: Optional[float], batch_size: int, b_max: int) -> "Recipe":
        """The user's recipe for a run at `batch_size`: its optimizer's own rates (or
        `base_lr`) are the rates at b_max, sqrt-scaled like the built-in ones."""
        return Recipe(
            optimizer=self.optimizer_factory,
            lr_scheduler=self.lr_scheduler,
            train_step=self.train_step,
            base_lr=base_lr,
            lr_scale=lr_scale(batch_size, b_max),
        )

    @property
    def recipe_paths(self) -> Dict[str, Optional[str]]:
        """The recipe's three import paths, as keyword arguments (and cache-key entries)."""
        return {k: getattr(self, k) for k in ("optimizer_factory", "lr_scheduler", "train_step")}


NO_USER_CODE = UserCode()  # undercap's own loss, metric and recipe


def lr_scale(batch_size: int, b_max: int) -> float:
    """sqrt(b / b_max): the learning-rate scaling from the largest batch (paper Sec. 4.2,
    after Krizhevsky 2014 and Hoffer et al. 2017); every trainer scales by this."""
    return math.sqrt(batch_size / b_max)


@dataclass(frozen=True)
class Recipe:
    """The user's recipe (None: undercap's own) at one batch size."""

    optimizer: Optional[str] = None  # import path of an optimizer factory
    lr_scheduler: Optional[str] = None  # import path of an LR scheduler factory
    train_step: Optional[str] = None  # import path of a training-step function
    base_lr: Optional[float] = None  # --lr, handed to the optimizer factory as lr=
    lr_scale: float = 1.0  # sqrt(b / b_max), applied to the optimizer's own rates

    @property
    def paths(self) -> tuple:
        return (self.optimizer, self.lr_scheduler, self.train_step)

    @property
    def is_default(self) -> bool:
        return not any(self.paths)

    def validate(self) -> None:
        """An UndercapError naming the flag of any path that is not an import path."""
        for flag, path in zip(("--optimizer", "--lr-scheduler", "--train-step"), self.paths):
            if path is not None:
                split(path, flag)

    def key(self) -> Dict[str, Any]:
        """What the recipe adds to a cache key or an artifact's configuration."""
        return {k: v for k, v in asdict(self).items() if k != "lr_scale"}
