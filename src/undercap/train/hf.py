"""A Hugging Face `TrainerCallback` that trains under a power cap (`pip install
'undercap[hf]'`): what `undercap.capped()` does, from the Trainer's own events (a
`with cb:` block restores the device even if `train()` raises). `on_init_end` sets the
Trainer's batch size and scales its rate by sqrt(b / b_max) (paper Sec. 4.2);
`on_train_begin` checks the batch size the Trainer really uses and locks the clock.
See docs/guides/hugging-face.md.
"""

from __future__ import annotations

from typing import Any

from undercap.errors import UndercapError, require
from undercap.train.callbacks import CapDriver, longest_input

_transformers = require("transformers", "hf", "the Hugging Face Trainer callback")


class UndercapTrainerCallback(_transformers.TrainerCallback):  # type: ignore[misc]
    """`transformers.TrainerCallback` under a power cap (module docstring): takes
    `undercap.capped`'s arguments plus `metric` and `scale_lr`."""

    def __init__(
        self,
        device: Any,
        selection: Any = None,
        *,
        metric: str = "eval_accuracy",
        scale_lr: bool = True,
        **kwargs: Any,
    ) -> None:
        self.driver = CapDriver(device, selection, metric=metric, **kwargs)
        self.scale_lr = scale_lr
        self._epoch_samples = 0  # trained in this epoch (its last batch may be short)

    @property
    def batch_size(self) -> int:
        return self.driver.batch_size

    def result(self) -> Any:
        return self.driver.result()

    def __enter__(self) -> UndercapTrainerCallback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.driver.end()

    # --- Trainer events ------------------------------------------------------------------
    def on_init_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        mixed = next((p for p in ("bf16", "fp16") if getattr(args, p, False)), "fp32")
        self.driver.trainer_precision(mixed, "TrainingArguments")  # before the batch size
        b, accum = self.driver.batch_size, int(args.gradient_accumulation_steps)
        if b % accum:
            raise UndercapError(
                f"the selected batch size {b} is not a multiple of "
                f"gradient_accumulation_steps={accum}"
            )
        args.per_device_train_batch_size = b // accum
        if self.scale_lr:
            args.learning_rate = self.driver.lr(float(args.learning_rate))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        # the Trainer's real batch size must be the selected one (transformers 5 fixes it
        # before `on_init_end`), or every step is charged b samples for fewer
        loader = kw.get("train_dataloader")
        real = _loader_batch_size(loader)
        want = self.driver.batch_size // int(args.gradient_accumulation_steps)
        if real is not None and real != want:
            raise UndercapError(
                f"the Trainer trains batches of {real}, not the selected {want}: build "
                "TrainingArguments with per_device_train_batch_size=callback.batch_size "
                "(divided by gradient_accumulation_steps)"
            )
        if self.driver.input_shape is None:
            self.driver.input_shape = longest_input(getattr(loader, "dataset", None))
        self.driver.begin(kw.get("model"))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.driver.resume()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._epoch_samples = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.driver.step(self._step_samples(kw.get("train_dataloader"), args))
        if control.should_evaluate or control.should_save:
            self.driver.pause()

    def _step_samples(self, loader: Any, args: Any) -> int:
        """b, or what is left of the epoch (a map-style dataset without drop_last)."""
        b = self.driver.batch_size
        try:
            left = len(loader.dataset) - self._epoch_samples
        except (AttributeError, TypeError):  # an iterable dataset: no length
            left = b
        n = b if args.dataloader_drop_last or left <= 0 else min(b, left)
        self._epoch_samples += n
        return n

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if control.should_evaluate or control.should_save:
            self.driver.pause()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.driver.evaluated(kw.get("metrics") or {}):
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.driver.end()


def _loader_batch_size(loader: Any) -> Any:
    """The batch size of a DataLoader (or accelerate's wrapper of one), or None."""
    for holder in (loader, getattr(loader, "batch_sampler", None)):
        size = getattr(holder, "batch_size", None)
        if isinstance(size, int):
            return size
    return None
