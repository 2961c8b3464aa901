"""A Lightning text classifier trained under a power cap.

Run from the repository root: `python examples/lightning_text_classifier.py` (needs
`pip install 'undercap[lightning]'`). A LightningModule of the usual shape: an
`nn.Embedding` of token ids, a mean over the unpadded positions (the batch's
`attention_mask`), a linear head, one label per sequence. `UndercapCallback` is added
with neither task nor input shape: undercap infers "sequence-classification" from
the module (its first layer takes token ids, its output is one row per sequence)
and the input shape from the longest training item. The callback picks
the batch size and clock for a 2.8 W cap on a simulated Jetson Nano and stops the
Trainer once `val_acc` reaches 0.9. The data are those of
examples/hf_sequence_classification.py (does the marker token appear?).

`build` is also the model factory for the CLI (`undercap profile --model
examples/lightning_text_classifier.py:build --input-shape 16`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_sequence_classification as seqcls  # noqa: E402  (the same data, no transformers)

try:
    import lightning.pytorch as pl
except ImportError:  # the factory still imports for the CLI's profile
    pl = None

Base: Any = pl.LightningModule if pl is not None else nn.Module


class TextClassifier(Base):  # type: ignore[misc,valid-type]
    def __init__(self, vocab: int = seqcls.VOCAB, num_classes: int = 2, lr: float = 0.01):
        super().__init__()
        self.embed = nn.Embedding(vocab, 32, padding_idx=seqcls.PAD)
        self.head = nn.Linear(32, num_classes)
        self.lr = lr
        self.batch_size = 8  # UndercapCallback sets the selected one

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None):
        h = self.embed(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1))

    def training_step(self, batch: dict, i: int) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"])
        return nn.functional.cross_entropy(logits, batch["labels"])

    def validation_step(self, batch: dict, i: int) -> None:
        logits = self(batch["input_ids"], batch["attention_mask"])
        self.log("val_acc", (logits.argmax(-1) == batch["labels"]).float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> Any:
        train, _ = seqcls.data()
        return torch.utils.data.DataLoader(train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> Any:
        _, test = seqcls.data()
        return torch.utils.data.DataLoader(test, batch_size=256)


def build(num_classes: int = 2, input_shape: Sequence[int] = (seqcls.LENGTH,)) -> nn.Module:
    return TextClassifier(num_classes=num_classes)


def main() -> None:
    import undercap
    from undercap.train.lightning import UndercapCallback

    torch.manual_seed(0)
    module = build()
    with undercap.open_device("sim:jetson-nano") as device:
        profile = undercap.run_profile(
            device,
            "examples/lightning_text_classifier.py:build",
            (seqcls.LENGTH,),
            [8, 16, 32, 64],
            num_classes=2,
            progress=False,
        )
        callback = UndercapCallback(
            device,
            power_limit_w=2.8,
            profile=profile,
            relative={8: 0.5, 16: 0.6, 32: 0.8, 64: 1.0},  # r(b): `undercap estimate`
            monitor="val_acc",  # no task=, no input_shape=: inferred
            target_accuracy=0.9,
        )
        trainer = pl.Trainer(
            callbacks=[callback],
            max_epochs=30,
            val_check_interval=4,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module)

    r = callback.result()
    print(
        f"batch {r.batch_size} at {r.freq_mhz_start:g} MHz under {r.power_limit_w} W: "
        f"reached={r.reached} after {r.samples} samples, {r.train_time_s:.2f} s "
        f"(simulated device), {r.energy_j:.1f} J, peak {r.peak_power_w:.2f} W, "
        f"limit exceeded: {r.limit_exceeded}"
    )


if __name__ == "__main__":
    main()
