"""The training stacks people already use (issue 19): an unmodified Hugging Face
GPT2LMHeadModel through the CLI, the HF Trainer and the Lightning Trainer reaching a
target through their callbacks on a simulated device, and the user's own optimizer,
LR schedule and training step for r(b). Skipped cleanly where an extra is absent."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import undercap
from undercap.cli import main
from undercap.errors import UndercapError

REPO = Path(__file__).resolve().parents[1]
QUICK = ["--device", "sim:jetson-nano", "--torch-device", "cpu", "--no-progress"]


def _corpus(path: Path) -> Path:
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "hat"]
    lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(10)) for i in range(150)]
    path.write_text("\n".join(lines))
    return path


def test_gpt2_profiles_runs_and_trains_on_text(tmp_path: Path, capsys, monkeypatch) -> None:
    """The issue's done-when: the unmodified GPT2LMHeadModel factory through profile,
    run and train --from-selection on text: data, with no wrapper."""
    pytest.importorskip("transformers")
    monkeypatch.chdir(REPO)
    text, model = f"text:{_corpus(tmp_path / 'c.txt')}", "examples/hf_gpt2.py:build"
    profile = ["profile", *QUICK, "--model", model, "--input-shape", "32", "--task",
               "next-token", "--batch-sizes", "8", "--freqs-mhz", "921.6",
               "-o", str(tmp_path / "p.json")]  # fmt: skip
    assert main(profile) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "p.json").read_text())["workload"]["param_count"] > 0
    out = tmp_path / "run"
    run = ["run", *QUICK, "--model", model, "--proxy", text, "--target", text,
           "--context", "32", "--power-limit", "4.5", "--target-accuracy", "0.4",
           "--batch-sizes", "8,16", "--estimate-seeds", "1", "--max-samples", "3000",
           "--eval-every", "250", "--lr", "0.003",
           "--cache-dir", str(tmp_path / "cache"), "-o", str(out)]  # fmt: skip
    assert main(run) == 0, capsys.readouterr().err
    first = json.loads((out / "train.json").read_text())
    again = tmp_path / "again.json"
    train = ["train", "--from-selection", str(out / "selection.json"), "--torch-device",
             "cpu", "--no-progress", "-o", str(again)]  # fmt: skip
    assert main(train) == 0, capsys.readouterr().err
    second = json.loads(again.read_text())
    assert first["reached"] and second["samples_to_target"] == first["samples_to_target"]


def test_hf_trainer_reaches_the_target_through_its_callback(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from undercap.train.hf import UndercapTrainerCallback

    sys.path.insert(0, str(REPO / "examples"))
    import hf_gpt2  # type: ignore[import-not-found]

    ids = torch.tensor([i % 12 for i in range(24 * 16)]).view(-1, 16)
    items = [{"input_ids": w, "labels": w} for w in ids]
    torch.manual_seed(0)
    model = hf_gpt2.build(num_classes=12, input_shape=(16,))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), learning_rate=4e-3, max_steps=120, eval_strategy="steps",
        eval_steps=5, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        per_device_train_batch_size=2,  # the callback replaces it with the selected 8
    )  # fmt: skip

    def accuracy(pred):
        logits, labels = pred
        return {"accuracy": float((logits[:, :-1] == labels[:, 1:]).mean())}

    with undercap.open_device("sim:jetson-nano") as device:
        cb = UndercapTrainerCallback(
            device, batch_size=8, freq_mhz=614.4, max_batch_size=32, model=model,
            input_shape=(16,), task="next-token", target_accuracy=0.8,
            eval_log=tmp_path / "evals.csv",
        )  # fmt: skip

        def make_trainer():
            return transformers.Trainer(
                model=model, args=args, train_dataset=items, eval_dataset=items[:4],
                compute_metrics=accuracy, callbacks=[cb],
                preprocess_logits_for_metrics=lambda logits, labels: logits.argmax(-1),
            )  # fmt: skip

        trainer = make_trainer()
        assert args.per_device_train_batch_size == 8
        assert args.learning_rate == pytest.approx(4e-3 * 0.5)  # sqrt(8 / 32)
        if trainer._train_batch_size != 8:  # transformers 5: fixed before on_init_end
            # issue 27: it trained 2 per step while 8 were charged; now one line says so
            with pytest.raises(UndercapError, match="per_device_train_batch_size=callback"):
                trainer.train()
            cb.scale_lr = False  # the arguments carry the scaled rate and b already
            trainer = make_trainer()
        assert trainer._train_batch_size == 8
        with cb:
            trainer.train()
    result = cb.result()
    assert result.reached and result.steps == trainer.state.global_step < 120
    assert result.samples == 8 * result.steps and result.energy_j > 0
    assert result.freq_mhz_start == 614.4 and not result.warnings
    assert len((tmp_path / "evals.csv").read_text().splitlines()) == len(result.curve) + 1


def test_lightning_trainer_reaches_the_target_through_its_callback() -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset

    from undercap.train.lightning import UndercapCallback

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    data = TensorDataset(x, (x[:, 0] > 0).to(torch.int64))

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.batch_size = torch.nn.Linear(8, 2), 4  # the callback sets 32

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

        def validation_step(self, batch, i):
            self.log("val_acc", (self(batch[0]).argmax(1) == batch[1]).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.4)

        def train_dataloader(self):
            return DataLoader(data, batch_size=self.batch_size, shuffle=True, drop_last=True)

        def val_dataloader(self):
            return DataLoader(data, batch_size=512)

    torch.manual_seed(0)
    module = Module()
    with undercap.open_device("sim:jetson-nano") as device:
        cb = UndercapCallback(device, batch_size=32, max_batch_size=128, input_shape=(8,),
                              monitor="val_acc", target_accuracy=0.95)  # fmt: skip
        trainer = pl.Trainer(
            callbacks=[cb], max_epochs=30, val_check_interval=4, accelerator="cpu",
            logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=0,
        )  # fmt: skip
        trainer.fit(module)
    result = cb.result()
    assert module.batch_size == 32 and result.batch_size == 32
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.4 * 0.5)
    assert result.reached and trainer.current_epoch < 29 and not result.warnings
    assert result.samples == 32 * result.steps and result.train_time_s > 0


RECIPE = """
    import torch

    def make_opt(params, lr=0.5):
        return torch.optim.Adadelta(params, lr=lr)

    def make_sched(optimizer, steps_per_epoch):
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=steps_per_epoch, gamma=0.7)

    def clipped(model, x, y, optimizer, loss_fn):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
"""


def _estimate(tmp_path: Path, out: str, *extra: str) -> dict:
    args = ["estimate", "--model", "small-cnn", "--dataset", "digits", "--limit", "400",
            "--batch-sizes", "16,32", "--seeds", "1", "--max-samples", "640", "--eval-every",
            "160", "--target-fraction", "0.8", "--torch-device", "cpu", "--no-progress",
            "--work-dir", str(tmp_path / "work"), "-o", str(tmp_path / out), *extra]  # fmt: skip
    assert main(args) in (0, 3)
    return json.loads((tmp_path / out).read_text())


def test_estimate_with_the_users_optimizer(tmp_path: Path, capsys, monkeypatch) -> None:
    """--optimizer changes what is trained, and is in the artifact and the cache key."""
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipe.py").write_text(textwrap.dedent(RECIPE))
    _estimate(tmp_path, "adam.json")
    recipe = ["--optimizer", "recipe.py:make_opt", "--lr-scheduler", "recipe.py:make_sched",
              "--train-step", "recipe.py:clipped"]  # fmt: skip
    own = _estimate(tmp_path, "own.json", *recipe)
    config = own["extra"]["config"] if "extra" in own else own["config"]
    assert config["optimizer_factory"] == "recipe.py:make_opt"
    assert config["lr_scheduler"] == "recipe.py:make_sched"
    assert config["train_step"] == "recipe.py:clipped" and config["base_lr"] is None
    files = (tmp_path / "work").glob("estimate-run/*/key.json")
    keys = [json.loads(p.read_text())["key"] for p in files]
    assert len(keys) == 4 and sum(k.get("optimizer_factory") is not None for k in keys) == 2
    records = [
        json.loads(p.read_text()) for p in (tmp_path / "work").glob("estimate-run/*/value.json")
    ]
    mine = {r["batch_size"]: r for r in records if "recipe" in r}
    assert mine[16]["recipe"]["optimizer_class"] == "Adadelta"
    assert mine[16]["recipe"]["lr_scale"] == pytest.approx(0.5**0.5)
    curves = {tuple(map(tuple, r["curve"])) for r in records if r["batch_size"] == 32}
    assert len(curves) == 2  # Adadelta trained something else than Adam
    capsys.readouterr()
    _estimate(tmp_path, "again.json", *recipe)
    assert "reused 2 finished run(s)" in capsys.readouterr().err
    (tmp_path / "recipe.py").write_text(textwrap.dedent(RECIPE).replace("0.5", "0.25"))
    _estimate(tmp_path, "edited.json", *recipe)  # an edit to the recipe redoes its runs
    assert len(list((tmp_path / "work").glob("estimate-run/*/key.json"))) == 6


def test_run_records_the_recipe_and_train_repeats_it(tmp_path: Path, capsys, monkeypatch) -> None:
    """run: the recipe goes into the selection, and train --from-selection uses it."""
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipe.py").write_text(textwrap.dedent(RECIPE))
    out = tmp_path / "run"
    run = ["run", *QUICK, "--model", "small-cnn", "--proxy", "digits", "--target", "digits",
           "--target-limit", "400", "--proxy-limit", "400", "--power-limit", "none",
           "--target-accuracy", "0.6", "--batch-sizes", "16,32", "--estimate-seeds", "1",
           "--max-samples", "2000", "--eval-every", "160",
           "--optimizer", "recipe.py:make_opt", "--full-profile", "-o", str(out)]  # fmt: skip
    assert main(run) == 0, capsys.readouterr().err
    selection = json.loads((out / "selection.json").read_text())
    assert selection["training"]["optimizer_factory"] == "recipe.py:make_opt"
    first = json.loads((out / "train.json").read_text())
    assert first["config"]["recipe"]["optimizer"] == "recipe.py:make_opt"
    train = ["train", "--from-selection", str(out / "selection.json"), "--torch-device", "cpu",
             "--no-progress", "-o", str(tmp_path / "again.json")]  # fmt: skip
    assert main(train) == 0, capsys.readouterr().err
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["config"]["recipe"] == first["config"]["recipe"]
    assert again["samples_to_target"] == first["samples_to_target"]


def test_a_bad_recipe_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipe.py").write_text("def not_an_optimizer(params):\n    return 3\n")
    args = ["train", *QUICK, "--model", "small-cnn", "--dataset", "digits", "--limit", "100",
            "--batch-size", "8", "--target-accuracy", "0.5", "--max-samples", "16",
            "--optimizer", "recipe.py:not_an_optimizer"]  # fmt: skip
    pytest.importorskip("sklearn")
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "returned a int, expected a torch.optim.Optimizer" in err[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "example, extra", [("hf_trainer.py", "transformers"), ("lightning_trainer.py", "lightning")]
)
def test_trainer_examples_run(example: str, extra: str) -> None:
    pytest.importorskip(extra)
    pytest.importorskip("sklearn")
    proc = subprocess.run(
        [sys.executable, f"examples/{example}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reached=True" in proc.stdout
