"""Model outputs and batches as libraries produce them (issue 19, point 1), the model's
own class count and input shape (issue 17, point 5), capped()'s misuse checks (issue
19, point 4) and the evaluation log (point 5). No optional extra needed."""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import undercap
from undercap.cli import main
from undercap.data.user import load_user_data
from undercap.errors import UndercapError
from undercap.models.outputs import batch_len, logits_of, loss_of, split_item
from undercap.models.workload import output_classes, workload_of
from undercap.train.api import CappedWarning
from undercap.train.loop.scoring import make_objective

QUICK = ["--device", "sim:jetson-nano", "--torch-device", "cpu", "--no-progress"]
LOGITS = torch.randn(4, 3)
LOSS = torch.tensor(0.5)


@pytest.mark.parametrize(
    "out, loss",
    [
        (LOGITS, None),
        ((LOGITS, torch.zeros(4, 8)), None),  # (logits, hidden)
        ((LOSS, LOGITS), LOSS),  # Hugging Face's return_dict=False with labels
        ({"logits": LOGITS}, None),
        ({"logits": LOGITS, "loss": LOSS}, LOSS),
        (SimpleNamespace(logits=LOGITS, loss=None), None),  # a ModelOutput without labels
        (SimpleNamespace(logits=LOGITS, loss=LOSS), LOSS),
    ],
)
def test_outputs_by_shape(out, loss) -> None:
    assert logits_of(out) is LOGITS
    assert loss_of(out) is loss
    objective = make_objective()
    y = torch.tensor([0, 1, 2, 0])
    expected = loss if loss is not None else nn.functional.cross_entropy(LOGITS, y)
    assert torch.equal(objective.loss(out, y), expected)  # the model's own loss first
    assert objective.score(out, y) == objective.score(LOGITS, y)
    with pytest.raises(TypeError, match="no logits"):
        logits_of({"hidden": LOGITS})


def test_batches_and_dataset_items() -> None:
    x, y = torch.zeros(5, 3), torch.zeros(5)
    for batch in (x, (x, y), [x, y], {"input_ids": x, "labels": y}, {"labels": y}):
        assert batch_len(batch) == 5
    assert split_item((1, 2)) == (1, 2, False)
    ids = torch.tensor([3, 4, 5])
    assert split_item({"input_ids": ids, "labels": ids})[2]  # causal LM: labels = inputs
    assert split_item({"input_ids": ids})[2]
    assert not split_item({"input_ids": ids, "label": torch.tensor(1)})[2]
    with pytest.raises(TypeError):
        split_item({"pixel_values": ids})  # no labels


def test_cross_entropy_and_accuracy_skip_ignored_labels() -> None:
    logits = torch.tensor([[[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]]])  # (1, 3, 2)
    y = torch.tensor([[0, 1, -100]])
    assert make_objective().score(logits, y) == (2.0, 2)


HF_STYLE = """
    import torch
    from torch import nn
    from types import SimpleNamespace

    class Lm(nn.Module):  # returns what a Hugging Face causal LM returns, by shape
        def __init__(self, vocab):
            super().__init__()
            self.emb, self.head = nn.Embedding(vocab, 16), nn.Linear(16, vocab)

        def forward(self, input_ids, labels=None):
            return SimpleNamespace(logits=self.head(self.emb(input_ids)), loss=None)

    def build(num_classes, input_shape):
        return Lm(num_classes)

    def two_outputs():
        return nn.Sequential(nn.Linear(30, 8), nn.ReLU(), nn.Linear(8, 2))

    def takes_20():
        return nn.Sequential(nn.Linear(20, 8), nn.ReLU(), nn.Linear(8, 2))

    def dict_items():  # a Hugging Face causal-LM dataset: labels are the input ids
        ids = torch.arange(40 * 9).remainder(7).reshape(40, 9)
        items = [{"input_ids": w, "labels": w.clone(), "attention_mask": w * 0 + 1} for w in ids]
        return items[:32], items[32:]
"""


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "hfish.py").write_text(textwrap.dedent(HF_STYLE))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_model_classes_from_a_forward_pass(user: Path, capsys) -> None:
    """Issue 17: a user model with 2 outputs profiles without --num-classes (the
    profile used to assume 10 and cross-entropy raised)."""
    args = ["profile", *QUICK, "--model", "hfish.py:two_outputs", "--input-shape", "30",
            "--batch-sizes", "8", "--freqs-mhz", "921.6", "-o", "p.json"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert json.loads((user / "p.json").read_text())["workload"]["flops_per_sample"] > 0
    from undercap.models.user import load_callable

    assert output_classes(load_callable("hfish.py:two_outputs", "model")(), (30,), None) == 2


def test_input_shape_mismatch_is_one_line_naming_both(user: Path, capsys) -> None:
    args = ["profile", *QUICK, "--model", "hfish.py:takes_20", "--input-shape", "30",
            "--batch-sizes", "8", "-o", "p.json"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "--input-shape 30" in err[0] and "takes 20 features" in err[0]


def test_object_outputs_and_dict_data_train_through_the_cli(user: Path, capsys) -> None:
    """A model returning a ModelOutput-like object, on a py: dataset of HF causal-LM
    dict items (labels shifted to the next token, the last position not scored)."""
    splits = load_user_data("py:hfish.py:dict_items")
    assert splits.task == "next-token" and splits.input_shape == (9,)
    assert torch.equal(splits.y_train[0, :-1], splits.x_train[0, 1:])
    assert int(splits.y_train[0, -1]) == -100
    args = ["train", *QUICK, "--model", "hfish.py:build", "--dataset", "py:hfish.py:dict_items",
            "--batch-size", "8", "--target-accuracy", "0.9", "--max-samples", "4000",
            "--eval-every", "200", "--lr", "0.03", "--eval-log", "evals.jsonl",
            "-o", "t.json"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    result = json.loads((user / "t.json").read_text())
    rows = [json.loads(line) for line in (user / "evals.jsonl").read_text().splitlines()]
    assert result["reached"] and len(rows) == len(result["curve"])
    assert rows[-1]["accuracy"] >= 0.9 and rows[-1]["energy_j"] > 0 and "loss" in rows[-1]
    assert rows[-1]["device_time_s"] == pytest.approx(result["train_time_s"])


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 4))


def test_capped_takes_batches_and_catches_misuse(tmp_path: Path) -> None:
    model = _tiny()
    with undercap.open_device("sim:jetson-nano") as device:
        kw = {"batch_size": 8, "model": model, "input_shape": (16,), "target_accuracy": 0.5}
        # forgetting step(): warned, and in the result
        with pytest.warns(CappedWarning, match="no step"), undercap.capped(device, **kw) as cap:
            cap.report(0.6)
        assert cap.result().steps == 0 and cap.result().warnings
        # batches as libraries give them; evaluation outside paused(): warned
        with undercap.capped(device, eval_log=tmp_path / "e.csv", **kw) as cap:
            cap.step({"input_ids": torch.zeros(8, 16), "labels": torch.zeros(8)})
            cap.step((torch.zeros(4, 16), torch.zeros(4)))  # an epoch's last batch
            with pytest.warns(CappedWarning, match="outside cap.paused"):
                cap.report(0.2, loss=1.0)  # extras of the first report are CSV columns
            cap.step(8)
            with cap.paused():
                accuracy = 0.7
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # paused evaluation: no warning
                assert cap.report(accuracy, loss=0.3)
            with pytest.raises(UndercapError, match="above the selected batch size 8"):
                cap.step(torch.zeros(16, 16))
        result = cap.result()
    assert result.samples == 20 and result.steps == 3 and result.reached
    lines = (tmp_path / "e.csv").read_text().splitlines()
    assert lines[0].startswith("samples,device_time_s,energy_j,accuracy") and len(lines) == 3
    assert lines[0].endswith(",loss") and lines[2].startswith("20,")


def test_workload_of_an_object_output_model() -> None:
    class Obj(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(16, 4)

        def forward(self, x):
            return SimpleNamespace(logits=self.lin(x), loss=None)

    wl = workload_of(Obj(), "obj", (16,))
    assert wl.flops_per_sample == pytest.approx(3 * 2 * 16 * 4, rel=0.5)


def test_eval_log_jsonl_and_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from undercap.train.evallog import EvalLog

    log = EvalLog.open(tmp_path / "e.jsonl", tmp_path / "tb")
    assert log is not None
    log.write({"samples": 8, "accuracy": 0.5, "loss": float("nan"), "freq_mhz": None})
    log.close()
    assert json.loads((tmp_path / "e.jsonl").read_text()) == {
        "samples": 8, "accuracy": 0.5, "loss": None, "freq_mhz": None
    }  # fmt: skip
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    with pytest.raises(UndercapError, match=".csv or .jsonl"):
        EvalLog.open(tmp_path / "e.txt")
