"""A PyTorch Lightning `Callback` that trains under a power cap (`pip install
'undercap[lightning]'`): what `undercap.capped()` does, from the Trainer's hooks.
`setup` sets a `batch_size` attribute of the datamodule or module to the selected b (as
Lightning's batch-size finder does); `on_train_start` scales the optimizers' rates by
sqrt(b / b_max) (paper Sec. 4.2) and locks the clock. See docs/guides/lightning.md.
"""

from __future__ import annotations

from typing import Any

from undercap.errors import require
from undercap.train.callbacks import CapDriver, longest_input

_pl = require("lightning.pytorch", "lightning", "the Lightning callback")


class UndercapCallback(_pl.Callback):  # type: ignore[misc]
    """`lightning.pytorch.Callback` under a power cap (module docstring). Takes
    `undercap.capped`'s arguments plus `monitor` (default "val_acc") and `scale_lr`
    (default True); `model=` defaults to the LightningModule being fitted."""

    def __init__(
        self,
        device: Any,
        selection: Any = None,
        *,
        monitor: str = "val_acc",
        scale_lr: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.driver = CapDriver(device, selection, metric=monitor, **kwargs)
        self.scale_lr = scale_lr

    @property
    def batch_size(self) -> int:
        return self.driver.batch_size

    def lr(self, base_lr: float) -> float:
        return self.driver.lr(base_lr)

    def result(self) -> Any:
        return self.driver.result()

    # --- Trainer hooks -------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        self.driver.trainer_precision(_precision(trainer), "Trainer(precision=...)")
        if self.driver.input_shape is not None or not self.driver.device.is_simulated:
            self.driver.attach(pl_module)  # else at on_train_start, from the loader's data
        for holder in (getattr(trainer, "datamodule", None), pl_module):
            if holder is not None and hasattr(holder, "batch_size"):
                holder.batch_size = self.driver.batch_size
                break

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.driver.input_shape is None:
            loader = getattr(trainer, "train_dataloader", None)
            self.driver.input_shape = longest_input(getattr(loader, "dataset", None))
        if self.scale_lr:
            _scale_lrs(trainer, self.driver.lr_factor())
        self.driver.begin(pl_module)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, i: int) -> None:
        self.driver.resume()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, i: int
    ) -> None:
        self.driver.step(batch)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self.driver.pause()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        if self.driver.evaluated(dict(trainer.callback_metrics)):
            trainer.should_stop = True

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self.driver.end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.driver.end()


def _precision(trainer: Any) -> str:
    """undercap's name for the Trainer's precision: "bf16-mixed"/"bf16-true" -> bf16,
    "16-mixed"/"16-true" -> fp16, anything else ("32-true", "64-true") -> fp32."""
    text = str(getattr(trainer, "precision", "32-true"))
    return "bf16" if "bf16" in text else "fp16" if text.startswith("16") else "fp32"


def _scale_lrs(trainer: Any, factor: float) -> None:
    """Every optimizer's rates, and its schedulers' base rates, times `factor`."""
    for opt in trainer.optimizers:
        for group in opt.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
    for config in getattr(trainer, "lr_scheduler_configs", []):
        sched = config.scheduler
        if hasattr(sched, "base_lrs"):
            sched.base_lrs = [lr * factor for lr in sched.base_lrs]
