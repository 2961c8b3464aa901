"""What the trainer callbacks (lightning.py, hf.py) do, in terms of trainer events.

A `CapDriver` drives one `undercap.capped(...)` handle (train/api.py) from a trainer's
events instead of a hand-written loop: `begin`, `step`, `pause`/`resume`, `evaluated`
(the trainer's own metric against the target) and `end` (idempotent, so a trainer's
end hook, its exception hook and a `with` block may all call it). The TrainSpec is
made at construction, so the trainer can be built with `batch_size` and `lr(base_lr)`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any, Optional, Sequence

from undercap.errors import REMOVED_IN_0_3, UndercapError, reject_removed
from undercap.models.outputs import split_item
from undercap.models.recipe import lr_scale
from undercap.train.api import Capped, _fitting
from undercap.train.evallog import EvalLog
from undercap.train.spec import chosen, warn_precision

_REMOVED = tuple(REMOVED_IN_0_3)  # capped() keywords 0.3.0 removed: one line each


class CapDriver:
    """One capped training, driven by trainer events (module docstring). `metric` is
    the name of the trainer's evaluation metric that must reach `target_accuracy`
    (higher is better); the other keyword arguments are `undercap.capped`'s."""

    def __init__(
        self,
        device: Any,
        selection: Any = None,
        *,
        metric: str,
        target_accuracy: float,
        model: Any = None,
        input_shape: Optional[Sequence[int]] = None,
        task: Optional[str] = None,
        **capped_kwargs: Any,
    ) -> None:
        self.device, self.selection, self.metric = device, selection, metric
        kw = dict(capped_kwargs)
        # a trainer keeps its batch size during training: a read-only device over its cap
        # cannot step it down here, so the excess is recorded and warned about
        kw.setdefault("switch_batch", False)
        reject_removed({k: kw.pop(k) for k in list(kw) if k in _REMOVED}, type(self).__name__)
        # the spec now, for the trainer's batch size and lr(); the handle when training
        # starts (attach). capped()'s keywords that say what the loop runs at: chosen()'s
        keywords = inspect.signature(chosen).parameters
        mine = {k: kw.pop(k) for k in list(kw) if k in keywords}
        self._chosen = dict(mine, target_accuracy=target_accuracy)
        self.spec, self._reselector = chosen(selection, **self._chosen)
        self.input_shape, self.task, self.kwargs = input_shape, task, kw
        self.cap: Any = None
        self._model = model
        self._entered = self._paused = False

    def trainer_precision(self, precision: str, where: str) -> None:
        """The precision the trainer trains in (its own setting, `where`), known before
        its batch size is fixed: a choice made from a profile is made again in it where
        no precision was given; a selection for another precision is one warning."""
        if "precision" in self._chosen or precision == self.spec.precision:
            return
        if self.selection is None and self._chosen.get("profile") is not None:
            self.spec, self._reselector = chosen(None, **dict(self._chosen, precision=precision))
            return
        warn_precision(self.spec.precision, precision, where)

    # --- what the trainer is built with ------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.cap.batch_size if self.cap is not None else int(self.spec.batch_size)

    def lr_factor(self) -> float:
        """sqrt(b / b_max): the paper's learning-rate scaling from the largest batch."""
        return lr_scale(self.batch_size, self.spec.max_batch_size or self.batch_size)

    def lr(self, base_lr: float) -> float:
        return base_lr * self.lr_factor()

    # --- trainer events ------------------------------------------------------------------
    def attach(self, model: Any) -> None:
        """Make the capped handle (a simulated device counts `model`'s workload)."""
        if self.cap is None:
            kw = dict(self.kwargs)
            m = self._model if self._model is not None else model
            fits = _fitting(
                self.device,
                kw.pop("workload", None),
                m,
                self.input_shape,
                self.task,
                self.spec.batch_size,
            )
            log = EvalLog.open(kw.pop("eval_log", None), kw.pop("tensorboard_dir", None))
            self.cap = Capped(
                self.device, self.spec, fits, reselector=self._reselector, eval_log=log, **kw
            )

    def begin(self, model: Any = None) -> None:
        self.attach(model)
        if not self._entered:
            self.cap.__enter__()
            self._entered = True

    def step(self, batch: Any) -> None:
        if self._entered:
            self.resume()
            self.cap.step(batch)

    def pause(self) -> None:
        if self._entered and not self._paused:
            self.cap.pause()  # the trainer's evaluation (or saving) is not training
            self._paused = True

    def resume(self) -> None:
        if self._entered and self._paused:
            self.cap.resume()
            self._paused = False

    def evaluated(self, metrics: Mapping[str, Any]) -> bool:
        """Report the trainer's metric; True once the target is reached."""
        if not self._entered:
            return False
        if self.metric not in metrics:
            raise UndercapError(
                f"the trainer's evaluation has no metric {self.metric!r} (it has "
                f"{', '.join(sorted(metrics)) or 'none'}); pass the name of the one that "
                "must reach the target"
            )
        extra = {k: float(v) for k, v in metrics.items() if k != self.metric and _number(v)}
        self.pause()
        return self.cap.report(float(metrics[self.metric]), **extra)

    def end(self) -> None:
        if self._entered:
            self._entered = self._paused = False
            self.cap.__exit__(None, None, None)

    def result(self) -> Any:
        """The CappedResult (train/api.py): time, energy and power of the training."""
        if self.cap is None:
            raise UndercapError("no training ran under this callback yet")
        return self.cap.result()


def longest_input(dataset: Any, most: int = 1000) -> Any:
    """Per-sample input shape from a training set when none was given: the longest main
    input among its first `most` items (models/outputs.split_item): with dynamic padding
    an upper bound on a step's work. None when the items cannot say (an iterable)."""
    try:
        shapes = [tuple(_shape(split_item(dataset[i])[0])) for i in range(min(len(dataset), most))]
    except (TypeError, ValueError, AttributeError, IndexError, KeyError):
        return None
    return max(shapes, key=lambda s: s[-1] if s else 0) if shapes else None


def _shape(value: Any) -> Any:
    return value.shape if hasattr(value, "shape") else (len(value),)


def _number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
