"""The online rule in a loop of your own (`capped(online=True)`) and in the trainer
callbacks: Lightning switches where it reloads its dataloaders, the Hugging Face Trainer
(batch size fixed) reports the switch it would make. The proxies are online_helpers'
(the run starts at b = 32, the first evaluation points to 16)."""

from __future__ import annotations

import json
import math

import pytest
from online_helpers import TABLE, proxy_efficiencies, write_selection
from select_helpers import make_profile

from undercap.artifacts.workload import Workload
from undercap.cli import main
from undercap.devices import open_device
from undercap.errors import UndercapError
from undercap.train.api import capped


@pytest.fixture(scope="module")
def work() -> Workload:
    """small-cnn on 8x8 digits: ~3.4 W on the simulated Nano at 921.6 MHz, under 5 W."""
    from undercap.models import build_model, workload_of

    model = build_model("small-cnn", num_classes=10, input_shape=(1, 8, 8))
    return workload_of(model, "small-cnn", (1, 8, 8))


def _loop(cap, evals: int = 2, acc: float = 0.3) -> list[int]:  # type: ignore[no-untyped-def]
    """A loop of your own: 4 steps at cap.batch_size, then an evaluation; the batch
    sizes it trained at."""
    seen = []
    for _ in range(evals):
        for _ in range(4):
            seen.append(cap.batch_size)
            cap.step(cap.batch_size)
        with cap.paused():
            cap.report(acc)
    return seen


def test_capped_online_switches_at_report_and_records_it(tmp_path, capsys, work) -> None:
    sel = write_selection(tmp_path, main, capsys)
    with open_device("sim:jetson-nano") as device, capped(
        device, sel, target_accuracy=0.9, workload=work, online=True
    ) as cap:
        assert (cap.batch_size, cap.lr(1.0)) == (32, 1.0)
        seen = _loop(cap)
        assert cap.lr(1.0) == pytest.approx(math.sqrt(16 / 32))  # re-read after report()
    assert seen == [32] * 4 + [16] * 4
    res = cap.result()
    assert [s["batch_size"] for s in res.segments] == [32, 16]
    assert [(s["from_batch_size"], s["to_batch_size"], s["applied"]) for s in res.online] == [
        (32, 16, True)
    ]
    assert "online: switching b=32 -> b=16" in capsys.readouterr().err
    # off by default: the same loop never switches
    with open_device("sim:jetson-nano") as device, capped(
        device, sel, target_accuracy=0.9, workload=work
    ) as cap:
        assert _loop(cap) == [32] * 8
    assert cap.result().segments == () and cap.result().online == ()


def test_capped_online_from_proxies_and_a_profile(work) -> None:
    profile = make_profile(TABLE, model="small-cnn")
    with open_device("sim:jetson-nano") as device:
        kw = dict(profile=profile, proxies=proxy_efficiencies(), power_limit_w=5.0, workload=work)
        with capped(device, target_accuracy=0.9, online=True, **kw) as cap:  # type: ignore[arg-type]
            assert _loop(cap, evals=1) == [32] * 4 and cap.batch_size == 16
        with pytest.raises(UndercapError, match="no recorded curves"):
            capped(device, target_accuracy=0.9, online=True, **{**kw, "proxies": {
                "a": {16: 0.3, 32: 1.0}, "b": {16: 2.0, 32: 1.0}}})  # fmt: skip


def test_capped_online_warns_when_reports_are_sparser_than_the_minimum(work) -> None:
    from undercap.train.api import CappedWarning

    profile = make_profile(TABLE, model="small-cnn")
    kw = dict(profile=profile, proxies=proxy_efficiencies(), power_limit_w=5.0, workload=work)
    with open_device("sim:jetson-nano") as device, capped(
        device,
        target_accuracy=0.9,
        online=True,
        **kw,  # type: ignore[arg-type]
    ) as cap:
        _loop(cap, evals=1)  # 128 samples: often enough
        assert cap.warnings == []
        with pytest.warns(CappedWarning, match="more often than every 2048 samples"):
            for _ in range(130):
                cap.step(16)
            with cap.paused():
                cap.report(0.3)


def test_capped_online_errors(tmp_path, capsys, work) -> None:
    sel = write_selection(tmp_path, main, capsys)
    obj = json.loads((tmp_path / "sel.json").read_text())
    del obj["online"]
    (tmp_path / "old.json").write_text(json.dumps(obj))
    with open_device("sim:jetson-nano") as device:
        with pytest.raises(UndercapError, match="has no online block"):
            capped(device, tmp_path / "old.json", target_accuracy=0.9, workload=work, online=True)
        with pytest.raises(UndercapError, match="needs a target accuracy"):
            capped(device, sel, workload=work, online=True)
        with pytest.raises(UndercapError, match="needs a selection made from several"):
            capped(device, batch_size=32, target_accuracy=0.9, workload=work, online=True)


def _lightning_module(pl, torch):  # type: ignore[no-untyped-def]
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    data = TensorDataset(x, (x[:, 0] > 0).to(torch.int64))

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.batch_size, self.seen = torch.nn.Linear(8, 2), 4, []

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.net(x)

        def training_step(self, batch, i):  # type: ignore[no-untyped-def]
            self.seen.append(len(batch[0]))
            return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch, i):  # type: ignore[no-untyped-def]
            self.log("val_acc", torch.tensor(0.3))  # below any target: the rule looks

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=0.4)

        def train_dataloader(self):  # type: ignore[no-untyped-def]
            return DataLoader(data, batch_size=self.batch_size, drop_last=True)

        def val_dataloader(self):  # type: ignore[no-untyped-def]
            return DataLoader(data, batch_size=256)

    return Module()


@pytest.mark.parametrize("reload", [1, 0])
def test_lightning_switches_where_it_reloads_its_loaders(tmp_path, capsys, reload) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    import torch

    from undercap.train.lightning import UndercapCallback
    from undercap.train.online_loop import OnlineWarning

    sel = write_selection(tmp_path, main, capsys)
    module = _lightning_module(pl, torch)
    with open_device("sim:jetson-nano") as device:
        cb = UndercapCallback(device, sel, input_shape=(8,), target_accuracy=0.9, online=True)
        trainer = pl.Trainer(
            callbacks=[cb], max_epochs=2, accelerator="cpu", logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0, reload_dataloaders_every_n_epochs=reload,
        )  # fmt: skip
        if reload:
            trainer.fit(module)
        else:
            with pytest.warns(OnlineWarning, match="reload_dataloaders_every_n_epochs=1"):
                trainer.fit(module)
    res, lr = cb.result(), trainer.optimizers[0].param_groups[0]["lr"]
    if reload:  # epoch 1 at b = 16, at the rate sqrt-scaled from 32 (b_max) down to 16
        assert module.seen == [32] * 8 + [16] * 16 and module.batch_size == 16
        assert [s["batch_size"] for s in res.segments] == [32, 16]
        assert lr == pytest.approx(0.4 * math.sqrt(16 / 32))
        assert [s["applied"] for s in res.online] == [True]
    else:  # no reload: the loaders keep b = 32; the switch is only reported, once
        assert module.seen == [32] * 16 and res.segments == () and lr == pytest.approx(0.4)
        assert [(s["to_batch_size"], s["applied"]) for s in res.online] == [(16, False)]


def test_hf_trainer_reports_the_switch_it_would_make(tmp_path, capsys) -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    from undercap.train.hf import UndercapTrainerCallback
    from undercap.train.online_loop import OnlineWarning

    sel = write_selection(tmp_path, main, capsys)

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 2)

        def forward(self, x, labels=None):  # type: ignore[no-untyped-def]
            logits = self.net(x)
            if labels is None:  # the workload probe's forward
                return {"logits": logits}
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    g = torch.Generator().manual_seed(0)
    xs = torch.randn(64, 8, generator=g)
    items = [{"x": x, "labels": int(x[0] > 0)} for x in xs]
    model = Tiny()
    with open_device("sim:jetson-nano") as device:
        cb = UndercapTrainerCallback(device, sel, model=model, input_shape=(8,),
                                     task="classification", target_accuracy=0.99, online=True)  # fmt: skip
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "hf"), learning_rate=1e-3, max_steps=6,
            eval_strategy="steps", eval_steps=2, save_strategy="no", report_to=[], use_cpu=True,
            disable_tqdm=True, per_device_train_batch_size=cb.batch_size,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=items, eval_dataset=items[:16],
            compute_metrics=lambda p: {"accuracy": 0.3}, callbacks=[cb],
        )  # fmt: skip
        with cb, pytest.warns(OnlineWarning, match="per_device_train_batch_size=16") as seen:
            trainer.train()
    assert len([w for w in seen if w.category is OnlineWarning]) == 1  # said once
    res = cb.result()
    assert res.segments == () and res.batch_size == 32  # the Trainer kept its batch size
    assert [(s["to_batch_size"], s["applied"]) for s in res.online] == [(16, False)]
