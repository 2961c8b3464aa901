"""Hugging Face tasks as people fine-tune them (issue 27): the task inferred from the
model and the data or named (--task, task=), each task's work counted, profiled,
estimated and trained through the CLI with an unmodified model from a tiny config,
padding and attention masks, and the HF Trainer and Lightning examples of a sequence
classifier reaching their targets with no task named. Nothing is downloaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from undercap.cli import main
from undercap.errors import DataError, UndercapError

REPO = Path(__file__).resolve().parents[1]
QUICK = ["--device", "sim:jetson-nano", "--torch-device", "cpu", "--no-progress"]
SEQCLS = "examples/hf_sequence_classification.py"
TASKS = "tests/fixtures/hf_tasks.py"


class _Pooled(nn.Module):  # a text classifier: token ids in, one row per sequence
    def __init__(self, per_position: bool = False) -> None:
        super().__init__()
        self.embed, self.head, self.per_position = (
            nn.Embedding(50, 8),
            nn.Linear(8, 3),
            per_position,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        return self.head(h if self.per_position else h.mean(1))


def test_tasks_are_inferred_from_plain_torch_models() -> None:
    from undercap.models.taskprobe import infer_task
    from undercap.models.tasks import task_named

    assert infer_task(nn.Sequential(nn.Linear(4, 2)), (4,)) == "classification"
    assert infer_task(_Pooled(), (12,)) == "sequence-classification"
    assert infer_task(_Pooled(per_position=True), (12,)) == "next-token"
    with pytest.raises(UndercapError, match="unknown task 'nope'; name one of .*seq2seq"):
        task_named("nope")


def test_hf_models_are_told_apart_by_their_task_head() -> None:
    pytest.importorskip("transformers")
    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    import hf_tasks  # type: ignore[import-not-found]

    from undercap.models.tasks import hf_task_of
    from undercap.models.workload import workload_of

    models = {
        "token-classification": hf_tasks.token_model(),
        "masked-lm": hf_tasks.masked_model(),
        "seq2seq": hf_tasks.seq2seq_model(),
    }
    for task, model in models.items():
        assert hf_task_of(model) == task
        wl = workload_of(model, task, (hf_tasks.LENGTH,))  # no task named: inferred
        assert wl.flops_per_sample > 0 and wl.activation_bytes_per_sample > 0
    assert hf_task_of(_Pooled()) is None


def test_the_issue_script_counts_work_without_a_task_and_a_wrong_one_is_one_line() -> None:
    """The issue's failures: float inputs fed to a BERT classifier (no task), and a raw
    ValueError with task="next-token"; now inferred, and a wrong task names the likely one."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(REPO / "examples"))
    import hf_sequence_classification as ex  # type: ignore[import-not-found]

    from undercap.models.workload import workload_of

    model = ex.build()
    assert workload_of(model, "bert-seqcls", (16,)).flops_per_sample > 0
    for wrong in ("next-token", "classification"):
        with pytest.raises(UndercapError, match="this looks like 'sequence-classification'") as e:
            workload_of(model, "bert-seqcls", (16,), wrong)
        assert "\n" not in str(e.value) and "--task" in str(e.value)


def test_padding_gives_one_pad_id_and_the_mask_is_rebuilt_from_it() -> None:
    pytest.importorskip("transformers")
    from undercap.data.user import load_user_data
    from undercap.models.hfinputs import feed_from_tensor

    splits = load_user_data(f"py:{REPO / SEQCLS}:data")
    assert splits.kind == "sequences" and splits.task == "sequence-classification"
    assert splits.pad_token_id == 0 and splits.input_shape == (16,)
    sys.path.insert(0, str(REPO / "examples"))
    import hf_sequence_classification as ex  # type: ignore[import-not-found]

    torch.manual_seed(0)
    model = ex.build().eval()
    x = splits.x_test[:4]
    masked = model(input_ids=x, attention_mask=(x != 0).to(torch.int64)).logits
    unmasked = model(x).logits
    feed_from_tensor(model, splits.pad_token_id, seq2seq=False)
    assert torch.allclose(model(x).logits, masked)  # the loops' model(x) is now masked
    assert not torch.allclose(unmasked, masked)  # and the mask matters on padded data


def _write_items(path: Path, body: str) -> str:
    path.write_text(f"import torch\ndef data():\n    items = {body}\n    return items, items\n")
    return f"py:{path}:data"


def test_padding_a_real_token_or_sentence_pairs_are_one_line_errors(tmp_path: Path) -> None:
    from undercap.data.user import load_user_data

    both = "torch.tensor([5, 3, 5, 5])"  # id 5 pads and is a real token
    spec = _write_items(
        tmp_path / "pads.py",
        f"[{{'input_ids': {both}, 'attention_mask': torch.tensor([1, 1, 1, 0]), "
        "'labels': torch.tensor(1)}] * 4",
    )
    with pytest.raises(DataError, match="pad with one id that no real token uses"):
        load_user_data(spec)
    spec = _write_items(
        tmp_path / "pairs.py",
        "[{'input_ids': torch.tensor([2, 3, 4]), 'token_type_ids': torch.tensor([0, 1, 1]), "
        "'labels': torch.tensor(0)}] * 4",
    )
    with pytest.raises(DataError, match="sentence pair"):
        load_user_data(spec)


def test_seq2seq_items_are_packed_and_the_model_gets_its_labels() -> None:
    pytest.importorskip("transformers")
    from undercap.data.user import load_user_data
    from undercap.models.hfinputs import feed_from_tensor

    splits = load_user_data(f"py:{REPO / TASKS}:seq2seq_data")
    assert splits.task == "seq2seq" and splits.input_shape == (2, 16)
    assert torch.equal(splits.x_train[:, 1], splits.y_train)
    assert (splits.y_train[:, 6:] == -100).all() and (splits.y_train[:, :6] >= 2).all()
    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    import hf_tasks  # type: ignore[import-not-found]

    torch.manual_seed(0)
    model = hf_tasks.seq2seq_model().eval()
    x, y = splits.x_train[:3], splits.y_train[:3]
    ids = x[:, 0].contiguous()
    want = model(input_ids=ids, attention_mask=(ids != 0).to(torch.int64), labels=y)
    feed_from_tensor(model, splits.pad_token_id, seq2seq=True)
    out = model(x)
    assert out.logits.shape == (3, 16, hf_tasks.VOCAB)
    assert torch.allclose(out.loss, want.loss, atol=1e-5)  # padded ids are masked out


def test_masked_lm_labels_are_not_shifted_and_the_task_can_be_named() -> None:
    """Masked-LM items whose masked positions happen to keep their token look like a
    causal LM's; only a dataset whose every item does is shifted."""
    from undercap.data.user import load_user_data

    guessed = load_user_data(f"py:{REPO / TASKS}:masked_data")
    named = load_user_data(f"py:{REPO / TASKS}:masked_data", task="masked-lm")
    assert guessed.task == "token-classification" and named.task == "masked-lm"
    for s in (guessed, named):
        scored = s.y_train != -100
        assert 0.1 < float(scored.float().mean()) < 0.2  # 15% masked, unshifted
        assert int(((s.y_train == s.x_train) & scored).sum()) > 0  # the kept 10%
    with pytest.raises(DataError, match="unknown task 'mlm'"):
        load_user_data(f"py:{REPO / TASKS}:masked_data", task="mlm")


def test_callbacks_take_the_longest_training_item_as_the_input_shape() -> None:
    from undercap.train.callbacks import longest_input

    items = [{"input_ids": torch.zeros(n, dtype=torch.long), "labels": 0} for n in (5, 9, 7)]
    assert longest_input(items) == (9,)
    assert longest_input([(torch.zeros(3, 4), 1)]) == (3, 4)
    assert longest_input(iter(items)) is None  # an iterable dataset cannot say


def _run_example(name: str) -> str:
    proc = subprocess.run(
        [sys.executable, f"examples/{name}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_hf_trainer_sequence_classifier_reaches_its_target_with_no_task_named() -> None:
    pytest.importorskip("transformers")
    last = _run_example("hf_sequence_classification.py")
    assert "reached=True" in last and "limit exceeded: False" in last, last


@pytest.mark.slow
def test_lightning_text_classifier_reaches_its_target_with_no_task_named() -> None:
    pytest.importorskip("lightning.pytorch")
    last = _run_example("lightning_text_classifier.py")
    assert "reached=True" in last and "limit exceeded: False" in last, last


# model, dataset, --task (None: inferred), target accuracy, --lr
CLI_TASKS = {
    "sequence-classification": (f"{SEQCLS}:build", f"{SEQCLS}:data", None, 0.9, 0.003),
    "token-classification": (f"{TASKS}:token_model", f"{TASKS}:token_data", None, 0.9, 0.003),
    "masked-lm": (f"{TASKS}:masked_model", f"{TASKS}:masked_data", "masked-lm", 0.2, 0.005),
    # a copy through the decoder: token accuracy 0.05 is 3x chance (1/62)
    "seq2seq": (f"{TASKS}:seq2seq_model", f"{TASKS}:seq2seq_data", None, 0.05, 0.003),
}


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(CLI_TASKS))
def test_each_task_profiles_estimates_and_trains_through_the_cli(
    task: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    """`undercap run`: profile, r(b) on the proxy, Algorithm 1, training to the target
    under the cap, for an unmodified HF model of each task."""
    pytest.importorskip("transformers")
    monkeypatch.chdir(REPO)
    model, data, named, target, lr = CLI_TASKS[task]
    out = tmp_path / "run"
    args = ["run", *QUICK, "--model", model, "--proxy", f"py:{data}", "--target",
            f"py:{data}", "--power-limit", "4", "--target-accuracy", str(target),
            "--batch-sizes", "8,16", "--estimate-seeds", "1", "--max-samples", "6000",
            "--eval-every", "512", "--lr", str(lr),
            "--cache-dir", str(tmp_path / "cache"), "-o", str(out)]  # fmt: skip
    args += ["--task", named] if named else []
    assert main(args) == 0, capsys.readouterr().err
    result = json.loads((out / "train.json").read_text())
    assert result["reached"] and not result["limit_exceeded"]
    profile = json.loads((out / "profile.json").read_text())
    assert profile["workload"]["flops_per_sample"] > 0
    selection = json.loads((out / "selection.json").read_text())
    assert selection["training"]["data"].get("task") == named  # --from-selection keeps it
