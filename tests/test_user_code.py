"""Users' own models, data, losses and metrics by import path, and the errors their
code can cause: each one `error:` line and exit code 2, naming what was expected."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from undercap.cli import main
from undercap.data import load_dataset
from undercap.errors import DataError, UndercapError
from undercap.models import build_model, model_spec, workload_of

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
QUICK = ["--device", "sim:jetson-nano", "--torch-device", "cpu", "--no-progress"]


def _write(path: Path, code: str) -> Path:
    path.write_text(textwrap.dedent(code))
    return path


DATA = """
    import torch
    from torch.utils.data import TensorDataset

    def load():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 2, 6, 6, generator=g)
        y = (x.mean(dim=(1, 2, 3)) > 0).long()
        return TensorDataset(x[:48], y[:48]), TensorDataset(x[48:], y[48:])

    def tokens():
        ids = torch.arange(40 * 9).remainder(7).reshape(40, 9)
        pairs = [(w[:-1], w[1:]) for w in ids]
        return pairs[:32], pairs[32:]

    def empty():
        return [], [(torch.zeros(2), 0)]

    def out_of_range():
        ds = TensorDataset(torch.randn(8, 3), torch.tensor([0, 1, 2, 3, 0, 1, 2, 5]))
        ds.num_classes = 4
        return ds, ds

    def not_a_pair():
        return TensorDataset(torch.randn(4, 3), torch.zeros(4).long())

    def ragged():
        return [(torch.zeros(3), 0), (torch.zeros(4), 1)], [(torch.zeros(3), 0)]

    def broken():
        raise RuntimeError("disk on fire")

    NOT_CALLABLE = 42
"""

MODELS = """
    from torch import nn

    def bare():
        return nn.Sequential(nn.Flatten(), nn.Linear(72, 2))

    def sized(num_classes, input_shape):
        c, h, w = input_shape
        return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, num_classes))

    def anything(**kwargs):
        return nn.Sequential(nn.Flatten(), nn.Linear(72, kwargs["num_classes"]))

    def wrong_outputs(input_shape):
        return nn.Sequential(nn.Flatten(), nn.Linear(72, 3, bias=False), nn.Unflatten(1, (1, 3)))

    def raises(num_classes):
        raise ValueError("no such layer")

    def not_a_module():
        return "resnet"
"""


@pytest.fixture
def user(tmp_path: Path) -> Path:
    _write(tmp_path / "userdata.py", DATA)
    _write(tmp_path / "usermodels.py", MODELS)
    return tmp_path


def test_factories_are_called_with_what_they_accept(user: Path) -> None:
    for name, classes in (("bare", 2), ("sized", 5), ("anything", 5)):
        model = build_model(
            f"{user}/usermodels.py:{name}", num_classes=classes, input_shape=(2, 6, 6)
        )
        assert model(torch.randn(3, 2, 6, 6)).shape == (3, 2 if name == "bare" else classes)
    spec = model_spec(f"{user}/usermodels.py:sized")
    assert not spec.builtin and spec.task is None and spec.optimizer == "adam"
    # the workload is counted from the real module, as for the built-ins
    wl = workload_of(
        build_model(spec.name, num_classes=2, input_shape=(2, 6, 6)), spec.name, (2, 6, 6)
    )
    assert wl.flops_per_sample > 0 and wl.param_count == 72 * 2 + 2


def test_models_by_package_path(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = user / "mynets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    _write(pkg / "small.py", MODELS)
    monkeypatch.syspath_prepend(str(user))
    model = build_model("mynets.small:sized", num_classes=4, input_shape=(2, 6, 6))
    assert model(torch.zeros(1, 2, 6, 6)).shape == (1, 4)
    with pytest.raises(UndercapError, match="no module named 'nosuchpkg'"):
        build_model("nosuchpkg.nets:build", num_classes=2, input_shape=(2, 6, 6))


def test_data_by_import_path(user: Path) -> None:
    s = load_dataset(f"py:{user}/userdata.py:load")
    assert s.kind == "samples" and s.task == "classification" and s.input_shape == (2, 6, 6)
    assert (s.n_train, s.n_test, s.num_classes) == (48, 16, 2)
    t = load_dataset(f"py:{user}/userdata.py:tokens", limit=8)
    assert t.kind == "tokens" and t.task == "next-token" and t.input_shape == (8,)
    assert t.n_train == 8 and t.num_classes == 7 and t.accuracy_kind == "token"
    mapped = load_dataset(f"py:{user}/userdata.py:load", input_shape=(2, 12, 12))
    assert mapped.input_shape == (2, 12, 12)


@pytest.mark.parametrize(
    "factory, message",
    [
        ("empty", "the train split is empty"),
        ("out_of_range", "label 5 is out of range for 4 classes"),
        ("not_a_pair", "expected a pair (train, test)"),
        ("ragged", "inputs have different shapes"),
        ("broken", "raised when called as (): RuntimeError: disk on fire"),
        ("NOT_CALLABLE", "is a int, not a callable"),
        ("missing", "has no 'missing'"),
    ],
)
def test_bad_data_is_one_clear_error(user: Path, factory: str, message: str) -> None:
    with pytest.raises(DataError, match=None) as e:
        load_dataset(f"py:{user}/userdata.py:{factory}")
    assert message in str(e.value) and "\n" not in str(e.value)


def _train_args(model: str, dataset: str) -> list[str]:
    return ["train", *QUICK, "--model", model, "--dataset", dataset, "--batch-size", "8",
            "--target-accuracy", "0.6", "--max-samples", "64", "--eval-every", "32"]  # fmt: skip


@pytest.mark.parametrize(
    "model, dataset, message",
    [
        ("usermodels.py:raises", "py:userdata.py:load", "raised when called as (num_classes=2)"),
        ("usermodels.py:wrong_outputs", "py:userdata.py:load", "output has shape (1, 3)"),
        ("usermodels.py:not_a_module", "py:userdata.py:load", "expected a torch.nn.Module"),
        ("usermodels.py:nothing", "py:userdata.py:load", "has no 'nothing'"),
        ("nofile.py:build", "py:userdata.py:load", "nofile.py does not exist"),
        ("usermodels.py:sized", "py:userdata.py:empty", "the train split is empty"),
        ("usermodels.py:sized", "py:userdata.py:out_of_range", "out of range for 4 classes"),
        ("usermodels.py:sized", "py:userdata.py:NOT_CALLABLE", "not a callable"),
    ],
)
def test_bad_user_code_exits_2_with_one_line(
    user: Path, model: str, dataset: str, message: str, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(user)
    assert main(_train_args(model, dataset)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_user_loss_and_metric(user: Path, capsys, monkeypatch) -> None:
    _write(
        user / "objective.py",
        """
        import torch.nn.functional as F

        def smooth(outputs, labels):
            return F.cross_entropy(outputs, labels, label_smoothing=0.1)

        def balanced(outputs, labels):
            pred = outputs.argmax(1)
            per_class = [(pred[labels == c] == c).float().mean() for c in labels.unique()]
            return float(sum(per_class) / len(per_class))
        """,
    )
    monkeypatch.chdir(user)
    out = user / "r.json"
    args = [*_train_args("usermodels.py:sized", "py:userdata.py:load"), "--loss",
            "objective.py:smooth", "--metric", "objective.py:balanced", "-o", str(out)]  # fmt: skip
    assert main(args) in (0, 3), capsys.readouterr().err  # 3: ran, target not reached
    result = json.loads(out.read_text())
    assert result["config"]["loss"] == "objective.py:smooth"
    assert result["config"]["metric"] == "objective.py:balanced"
    assert all(0.0 <= p["accuracy"] <= 1.0 for p in result["curve"])


def test_run_then_train_from_selection_on_unseen_model_and_data(tmp_path, capsys, monkeypatch):
    """The issue's done-when: `run` with a model and data undercap has never seen, then
    `train --from-selection` with the same model and data reproduces the run."""
    monkeypatch.chdir(REPO)
    out = tmp_path / "run"
    model, proxy = "examples/my_model.py:build", "py:examples/my_data.py:load_proxy"
    target = "py:examples/my_data.py:load_target"
    args = ["run", *QUICK, "--model", model, "--proxy", proxy, "--target", target,
            "--power-limit", "3.6", "--target-accuracy", "0.8", "--batch-sizes", "16..64",
            "--estimate-seeds", "1", "--max-samples", "8000", "--eval-every", "128", "--lr", "0.003",
            "--cache-dir", str(tmp_path / "cache"), "-o", str(out)]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    sel = json.loads((out / "selection.json").read_text())
    run = json.loads((out / "train.json").read_text())
    assert run["reached"] and sel["model"] == model and sel["peak_power_w"] <= 3.6
    profile = json.loads((out / "profile.json").read_text())
    assert profile["input_shape"] == [1, 16, 16] and profile["workload"]["flops_per_sample"] > 0
    again = tmp_path / "again.json"
    train = ["train", "--from-selection", str(out / "selection.json"), "--model", model,
             "--dataset", target, "--torch-device", "cpu", "--no-progress", "-o", str(again)]  # fmt: skip
    assert main(train) == 0, capsys.readouterr().err
    rerun = json.loads(again.read_text())
    for key in ("reached", "time_to_accuracy_s", "samples_to_target", "batch_size", "lr"):
        assert rerun[key] == run[key], key


def test_readme_own_loop_example_runs_as_written() -> None:
    """The docs' plain-PyTorch example is examples/own_loop.py, verbatim."""
    page = (REPO / "docs" / "guides" / "own-code.md").read_text()
    code = (EXAMPLES / "own_loop.py").read_text()
    body = code[code.index("import sys") :]
    assert body.strip() in page, "docs' own-loop example differs from examples/own_loop.py"
    import subprocess

    proc = subprocess.run(
        [sys.executable, "examples/own_loop.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "to 90% (simulated device)" in proc.stdout


def test_third_party_model_package(tmp_path, capsys, monkeypatch) -> None:
    pytest.importorskip("efficientnet_pytorch")
    monkeypatch.chdir(REPO)
    out = tmp_path / "p.json"
    args = ["profile", "--device", "sim:jetson-nano", "--model",
            "examples/efficientnet_model.py:build", "--input-shape", "3x32x32",
            "--batch-sizes", "8,16", "--freqs-mhz", "921.6", "--torch-device", "cpu",
            "--no-progress", "-o", str(out)]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    profile = json.loads(out.read_text())
    # EfficientNet-B0 with a 10-class head: about 4.0 M parameters
    assert 3.5e6 < profile["workload"]["param_count"] < 4.5e6
    train = ["train", *QUICK, "--model", "examples/efficientnet_model.py:build",
             "--dataset", "digits", "--input-shape", "3x32x32", "--limit", "200",
             "--batch-size", "16", "--target-accuracy", "0.99", "--max-samples", "64",
             "--eval-every", "64", "-o", str(tmp_path / "t.json")]  # fmt: skip
    assert main(train) == 3, capsys.readouterr().err  # ran; 99% in 64 samples is out of reach
