"""The loop's optimizer: the model registry's (`make_optimizer`), or a user's recipe
(models/recipe.py) built from its import paths (the optimizer, the LR scheduler and
the training step), with the paper's sqrt LR scaling applied to the optimizer's own
rates. Every problem is one UndercapError line naming the import path and what was
expected."""

import inspect
import math
from typing import Any, Callable, Optional

import torch
from torch import nn

from undercap.errors import UndercapError
from undercap.models.recipe import Recipe
from undercap.models.user import call_with_supported, load_callable


def make_optimizer(model: nn.Module, cfg: Any) -> torch.optim.Optimizer:
    """The loop's optimizer (cfg: loop.LoopConfig): the user's recipe's, else the
    registry's Adam, AdamW or SGD at the loop's (sqrt-scaled) rate."""
    if cfg.recipe.optimizer is not None:
        return build_optimizer(model, cfg.recipe)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}")


def build_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """The user's optimizer over the model's trainable parameters, every group's rate
    (the rate at the largest batch) times `recipe.lr_scale`."""
    path = recipe.optimizer
    assert path is not None
    kwargs: dict = {"params": [p for p in model.parameters() if p.requires_grad], "model": model}
    if recipe.base_lr is not None:
        kwargs["lr"] = recipe.base_lr
    opt = call_with_supported(load_callable(path, "optimizer"), path, "optimizer", **kwargs)
    if not (hasattr(opt, "param_groups") and callable(getattr(opt, "step", None))):
        raise UndercapError(
            f"optimizer {path!r} returned a {type(opt).__name__}, expected a torch.optim.Optimizer"
        )
    rescale(opt, None, recipe.lr_scale)
    return opt


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    recipe: Recipe,
    batch_size: int,
    n_train: int,
    max_samples: int,
) -> Optional[Any]:
    """The user's LR scheduler (None without one), stepped after every optimizer step."""
    path = recipe.lr_scheduler
    if path is None:
        return None
    sched = call_with_supported(
        load_callable(path, "LR scheduler"),
        path,
        "LR scheduler",
        optimizer=optimizer,
        steps_per_epoch=max(1, math.ceil(n_train / batch_size)),
        max_steps=max(1, math.ceil(max_samples / batch_size)),
    )
    if not callable(getattr(sched, "step", None)):
        raise UndercapError(
            f"LR scheduler {path!r} returned a {type(sched).__name__}, expected an object "
            "with step() (torch.optim.lr_scheduler)"
        )
    return sched


def rescale(optimizer: Any, scheduler: Optional[Any], factor: float) -> None:
    """Multiply every group's rate (and a scheduler's base rates) by `factor`: the
    sqrt scaling at the start, and a batch-size switch under a changing cap."""
    if factor == 1.0:
        return
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * factor
        if "initial_lr" in group:
            group["initial_lr"] = group["initial_lr"] * factor
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]


StepFn = Callable[[nn.Module, torch.Tensor, torch.Tensor, Any, Any], Any]


def build_train_step(path: str) -> StepFn:
    """The user's training step as step(model, x, y, optimizer, loss_fn); the keyword
    arguments its signature names are resolved once, not per step."""
    fn = load_callable(path, "train step")
    names = ("model", "x", "y", "batch", "optimizer", "loss_fn")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = ()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        wanted = set(names)
    else:
        wanted = {p.name for p in params if p.name in names}

    def step(
        model: nn.Module, x: torch.Tensor, y: torch.Tensor, optimizer: Any, loss_fn: Any
    ) -> Any:
        given = {"model": model, "x": x, "y": y, "batch": (x, y), "optimizer": optimizer}
        given["loss_fn"] = loss_fn
        try:
            return fn(**{k: v for k, v in given.items() if k in wanted})
        except UndercapError:
            raise
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UndercapError(f"train step {path!r} raised {type(e).__name__}: {msg}") from e

    return step


def describe(optimizer: Any, recipe: Recipe) -> dict:
    """What the recipe built, for a run's record: the optimizer's class, its rates
    when the run ended (after any schedule) and the sqrt scale applied."""
    return {
        **recipe.key(),
        "optimizer_class": type(optimizer).__name__,
        "lrs_at_end": [float(g["lr"]) for g in optimizer.param_groups],
        "lr_scale": recipe.lr_scale,
    }
