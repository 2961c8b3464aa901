"""Mixed precision as a knob of the method: the simulated boards' rates (from their spec
files), workloads counted under autocast, profiles and selections per precision, the
loop under autocast with fp16's GradScaler in its checkpoints, and the one-line
refusals of a precision the device or torch cannot run."""

import json

import pytest
import torch

from undercap.artifacts.profile import Profile, ProfileRow
from undercap.cli import main
from undercap.devices import open_device
from undercap.errors import ArtifactError, UndercapError
from undercap.models.registry import model_spec
from undercap.models.workload import workload_of
from undercap.select import select_ours
from undercap.select.objectives import choose

BOARDS = {
    "sim:jetson-nano": ("fp32", "fp16"),
    "sim:jetson-tx2nx": ("fp32", "fp16"),
    "sim:jetson-xavier-nx": ("fp32", "fp16"),
    "sim:jetson-orin-nano": ("fp32", "fp16", "bf16"),
}
SMALL = ("small-cnn", (1, 8, 8))


def _workload(precision: str):
    model = model_spec("small-cnn").build(num_classes=10, input_shape=SMALL[1])
    return workload_of(model, *SMALL, precision=precision)


def test_each_board_runs_the_precisions_its_gpu_has() -> None:
    assert {name: open_device(name).precisions() for name in BOARDS} == BOARDS


def test_a_workload_counted_under_autocast_moves_half_the_bytes() -> None:
    fp32, bf16 = _workload("fp32"), _workload("bf16")
    assert bf16.flops_per_sample == fp32.flops_per_sample
    assert bf16.activation_bytes_per_sample == pytest.approx(
        fp32.activation_bytes_per_sample / 2, rel=0.3
    )
    assert bf16.traffic_bytes_per_sample < 0.7 * fp32.traffic_bytes_per_sample
    assert bf16.kernels_per_step > fp32.kernels_per_step  # the casts
    assert bf16.precision == "bf16" and "precision" not in fp32.to_dict()


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_sixteen_bit_is_faster_and_draws_less_at_every_clock(name: str) -> None:
    """Every board's 16-bit rate is at least FP32's (FP16x2, Tensor Cores): at the same
    (b, f) a step is shorter and, the compute being shorter, the mean power lower."""
    dev = open_device(name)
    fp32, half = _workload("fp32"), _workload(BOARDS[name][-1])
    for f in dev.available_freqs_mhz():
        a, h = dev.model_step(fp32, 64, f), dev.model_step(half, 64, f)
        assert h.time_per_sample_s < a.time_per_sample_s and h.power_w < a.power_w


def test_a_precision_the_board_lacks_is_one_line_naming_those_it_has(tmp_path, capsys) -> None:
    args = ["run", "--device", "sim:jetson-nano", "--model", "small-cnn", "--proxy", "digits",
            "--proxy-limit", "360", "--target", "digits", "--batch-sizes", "8..64",
            "--power-limit", "3.5", "--target-accuracy", "0.9", "--precision", "bf16",
            "--no-progress", "-o", str(tmp_path / "r")]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0] == (
        "error: sim:jetson-nano has no bf16 (it runs fp32, fp16); use --precision fp16, or auto"
    )
    assert not (tmp_path / "r" / "train.json").exists()


def _row(b: int, f: float, t: float, p: float, precision: str) -> ProfileRow:
    return ProfileRow(b, f, t, p, p * 0.9, precision=precision)


def _profile() -> Profile:
    rows = [
        _row(b, f, t / b, p, "fp32")
        for b, f, t, p in [(8, 500, 1.0, 3.0), (32, 500, 2.0, 4.0), (32, 900, 1.5, 5.5)]
    ]
    rows += [
        _row(b, f, t / b, p, "fp16")
        for b, f, t, p in [(8, 500, 0.7, 2.8), (32, 500, 1.2, 3.6), (32, 900, 0.9, 4.9)]
    ]
    return Profile(device={"name": "sim:x"}, model="m", input_shape=(1,), rows=tuple(rows))


def test_the_choice_is_made_in_one_precision_or_among_them() -> None:
    prof, rel = _profile(), {8: 0.5, 32: 1.0}
    assert select_ours(prof, rel, 5.0).precision == "fp32"  # several: fp32 unless asked
    auto = select_ours(prof, rel, 5.0, precision="auto")
    assert (auto.precision, auto.batch_size, auto.freq_mhz) == ("fp16", 32, 900)
    assert choose(prof, rel, 5.0, precision="fp16").precision == "fp16"
    with pytest.raises(ArtifactError, match="no bf16 rows .* --precision bf16"):
        select_ours(prof, rel, 5.0, precision="bf16")
    with pytest.raises(ArtifactError, match="holds rows in fp32, fp16"):
        from undercap.select import per_batch

        per_batch(prof, rel, 5.0)


def test_profile_rows_carry_their_precision_and_old_rows_read_as_fp32(tmp_path) -> None:
    prof = _profile()
    again = Profile.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert again.precisions == ("fp32", "fp16") and again.rows == prof.rows
    old = prof.in_precision("fp32").to_dict()
    for r in old["rows"]:
        del r["precision"]
    assert Profile.from_dict(old).precisions == ("fp32",)


@pytest.mark.server
def test_run_auto_profiles_every_precision_and_trains_in_the_chosen_one(tmp_path, capsys) -> None:
    out = tmp_path / "r"
    args = ["run", "--device", "sim:jetson-orin-nano", "--model", "small-cnn", "--proxy",
            "digits", "--proxy-limit", "300", "--target", "digits", "--target-limit", "600",
            "--batch-sizes", "16,64", "--max-samples", "3000", "--eval-every", "128",
            "--estimate-seeds", "1", "--power-limit", "6", "--target-accuracy", "0.8",
            "--precision", "auto", "--no-progress", "-o", str(out)]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    sel = json.loads((out / "selection.json").read_text())
    train = json.loads((out / "train.json").read_text())
    prof = json.loads((out / "profile.json").read_text())
    assert sel["precisions_profiled"] == ["fp32", "fp16", "bf16"]
    assert {r["precision"] for r in prof["rows"]} == {"fp32", "fp16", "bf16"}
    assert sel["precision"] != "fp32" and train["precision"] == sel["precision"]
    printed = capsys.readouterr().out
    assert f"MHz in {sel['precision']}" in printed
    # the host trained the board's fp16 in bf16 (this CPU), and says so
    if sel["precision"] == "fp16":
        assert train["host_precision"] == "bf16" and "stand-in for fp16" in printed


def _trainer(precision: str, digits):
    from undercap.train.loop import LoopConfig, Trainer

    torch.manual_seed(0)
    model = model_spec("small-cnn").build(num_classes=10, input_shape=(1, 8, 8))
    cfg = LoopConfig(batch_size=32, lr=3e-3, target_accuracy=None, max_samples=1024,
                     eval_every_samples=256, precision=precision)  # fmt: skip
    return Trainer(model, digits, cfg)


@pytest.fixture(scope="module")
def digits():
    from undercap.data import load_dataset

    return load_dataset("digits", input_shape=(1, 8, 8), limit=600)


def test_a_killed_fp16_run_resumes_exactly_with_its_loss_scale(digits) -> None:
    """fp16 on this CPU (autocast + a GradScaler): a run checkpointed half way and
    resumed in a new trainer ends bit for bit as the uninterrupted one, its scaler's
    scale and growth tracker included."""
    try:
        whole = _trainer("fp16", digits)
    except UndercapError as e:
        pytest.skip(str(e))
    whole.run()
    first = _trainer("fp16", digits)
    while first.samples < 512:
        first.step()
    state = first.state_dict()
    assert state["scaler"] is not None and state["scaler"]["scale"] > 0
    second = _trainer("fp16", digits)
    second.load_state_dict(state)
    second.run()
    assert second.scaler.state_dict() == whole.scaler.state_dict()
    for a, b in zip(second.model.parameters(), whole.model.parameters()):
        assert torch.equal(a, b)
    assert [p.accuracy for p in second.curve] == [p.accuracy for p in whole.curve][
        -len(second.curve) :
    ]


def test_bf16_trains_and_fp32_has_no_scaler(digits) -> None:
    assert _trainer("fp32", digits).scaler is None
    t = _trainer("bf16", digits)
    assert t.scaler is None
    result = t.run()
    assert result.samples_trained == 1024 and 0.0 < result.final_accuracy <= 1.0


def test_lightning_and_hugging_face_precisions_map_to_undercaps() -> None:
    pytest.importorskip("lightning.pytorch")
    from types import SimpleNamespace

    from undercap.train.lightning import _precision

    names = {"32-true": "fp32", "16-mixed": "fp16", "bf16-mixed": "bf16", "bf16-true": "bf16",
             "16-true": "fp16", "64-true": "fp32"}  # fmt: skip
    for given, want in names.items():
        assert _precision(SimpleNamespace(precision=given)) == want


def test_a_trainer_in_another_precision_chooses_again_or_warns(capsys) -> None:
    """From a profile (no precision given): chosen again in the trainer's; from a
    selection for another precision: trained as selected, one warning naming both."""
    from undercap.train.callbacks import CapDriver

    dev = open_device("sim:jetson-orin-nano")
    driver = CapDriver(dev, profile=_profile(), relative={8: 0.5, 32: 1.0}, power_limit_w=5.0,
                       metric="acc", target_accuracy=0.5)  # fmt: skip
    assert driver.spec.precision == "fp32"
    driver.trainer_precision("fp16", "TrainingArguments")
    assert (driver.spec.precision, driver.spec.batch_size) == ("fp16", 32)
    from undercap.artifacts.selection import Selection

    sel = Selection("ours", 8, 500.0, 0.1, 3.0, 5.0, "m", "sim:x", True, precision="fp16")
    driver = CapDriver(dev, sel, metric="acc", target_accuracy=0.5)
    driver.trainer_precision("bf16", "Trainer(precision=...)")
    err = capsys.readouterr().err
    assert driver.spec.precision == "fp16"
    assert err.count("\n") == 1 and "trains in bf16" in err and "fp16" in err


def test_a_gpu_evaluation_reads_its_sums_once_and_agrees_with_the_cpus(digits, monkeypatch) -> None:
    """The GPU path of a whole evaluation (its sums kept on the device, read once),
    run here on the CPU's tensors, gives the CPU path's accuracy and loss."""
    from undercap.train.loop import gpu
    from undercap.train.loop.scoring import make_objective, score_until

    model = model_spec("small-cnn").build(num_classes=10, input_shape=(1, 8, 8)).eval()
    obj = make_objective()
    cpu = score_until(model, digits.x_test, digits.y_test, objective=obj, batch_size=64)
    monkeypatch.setattr(gpu, "on_gpu", lambda _d: True)
    right, n, loss, items = gpu.whole_sums_on_device(
        model, digits.x_test, digits.y_test, obj.loss, 64, "cpu"
    )
    assert right / n == pytest.approx(cpu.metric, abs=1e-12) and items == cpu.items
    assert loss / items == pytest.approx(cpu.loss, rel=1e-6)
