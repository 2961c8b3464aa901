"""A PyTorch Lightning Trainer under a power cap: `UndercapCallback`.

Run from the repository root: `python examples/lightning_trainer.py` (needs
`pip install 'undercap[lightning]'` and scikit-learn for the digits). The
LightningModule is written as Lightning users write one; the callback picks the
batch size and GPU clock for a 3.5 W cap on a simulated Jetson Nano (Algorithm 1 on a
profile and r(b), typed in here), sets the module's `batch_size`, scales the
optimizer's learning rate, counts device time and energy, pauses during validation
and stops the Trainer when the logged `val_acc` reaches the target.
"""

import sys

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, "examples")
import my_data  # noqa: E402
import my_model  # noqa: E402

import undercap  # noqa: E402
from undercap.train.lightning import UndercapCallback  # noqa: E402


class Digits(L.LightningModule):
    def __init__(self, lr: float = 3e-3, batch_size: int = 32) -> None:
        super().__init__()
        self.net = my_model.build(num_classes=10, input_shape=(1, 16, 16), width=16)
        self.lr, self.batch_size = lr, batch_size  # the callback sets batch_size
        self.train_set, self.test_set = my_data.load_target()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, i):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean(), on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)  # at the largest batch

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self):
        return DataLoader(self.test_set, batch_size=256)


torch.manual_seed(0)
module = Digits()
with undercap.open_device("sim:jetson-nano") as device:
    profile = undercap.run_profile(
        device, "examples/my_model.py:build", (1, 16, 16), [16, 32, 64], progress=False
    )
    callback = UndercapCallback(
        device,
        power_limit_w=3.5,
        profile=profile,
        relative={16: 0.5, 32: 0.7, 64: 1.0},  # r(b): `undercap estimate`
        input_shape=(1, 16, 16),
        monitor="val_acc",
        target_accuracy=0.9,
    )
    trainer = L.Trainer(
        callbacks=[callback],
        max_epochs=20,
        val_check_interval=10,  # validate every 10 training steps
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)

result = callback.result()
print(
    f"batch {result.batch_size} at {result.freq_mhz_start:g} MHz under {result.power_limit_w} W: "
    f"reached={result.reached} after {result.samples} samples, "
    f"{result.train_time_s:.2f} s (simulated device), {result.energy_j:.1f} J"
)
