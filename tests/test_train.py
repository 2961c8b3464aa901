"""Device training runtime: accounting, power guard, checkpoints (in-process, sim Nano)."""

import json
import os

import pytest

from undercap.artifacts.train_result import TrainResult, load_train_result, save_train_result
from undercap.devices.simulated import SimulatedDevice
from undercap.errors import ArtifactError, CapExceededError, InfeasibleError
from undercap.models.registry import model_spec
from undercap.report.text import train_summary
from undercap.train import train_on_device
from undercap.train.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from undercap.train.session.guard import BATCH_DOWN, READ_ONLY, STEP_DOWN, PowerGuard

TOP_MHZ = 921.6
# small-cnn, b=32 on the simulated Nano draws ~3.42 W at 921.6 MHz and ~3.34 W at
# 844.8 MHz (model_step); a limit between them is "slightly exceeded" at the top.
SLIGHT_LIMIT_W = 3.38


@pytest.fixture(scope="module")
def digits():
    from undercap.data import load_dataset

    return load_dataset("digits", input_shape=(1, 8, 8), limit=600)


@pytest.fixture(scope="module")
def workload():
    from undercap.models import build_model, workload_of

    model = build_model("small-cnn", num_classes=10, input_shape=(1, 8, 8))
    return workload_of(model, "small-cnn", (1, 8, 8))


def nano(seed: int = 0, read_only: bool = False) -> SimulatedDevice:
    return SimulatedDevice.from_name("jetson-nano", seed=seed, read_only=read_only)


def train(dev, data, **kw):
    args = dict(
        batch_size=32,
        target_accuracy=0.9,
        max_samples=6000,
        eval_every_samples=256,
        progress=False,
    )
    args.update(kw)
    return train_on_device(dev, "small-cnn", data, **args)


def test_result_accounts_modelled_time_energy_and_restores_clock(digits, workload, tmp_path):
    dev = nano()
    before = dev.save_state()
    r = train(dev, digits, freq_mhz=614.4)
    assert dev.save_state() == before  # unlocked again after the run
    assert r.simulated and r.time_basis == "virtual" and r.device["is_simulated"]
    assert r.reached and r.samples_to_target == r.samples_trained
    assert r.samples_to_target % 256 == 0 and r.final_accuracy >= 0.9
    assert r.curve[-1]["accuracy"] == r.final_accuracy
    assert r.steps * 32 == r.samples_trained
    # Training time is exactly the sum of modelled step times (evaluation not charged).
    step = dev.model_step(workload, 32, 614.4)
    assert r.time_to_accuracy_s == pytest.approx(r.steps * step.step_time_s, rel=1e-9)
    assert r.time_to_accuracy_s == pytest.approx(dev.now_s(), rel=1e-9)
    # Energy integrated from noisy readings matches the noise-free model within noise.
    assert r.energy_j == pytest.approx(dev.busy_energy_j(0.0, dev.now_s()), rel=0.03)
    assert r.mean_power_w == pytest.approx(step.power_w, rel=0.03)
    assert r.energy_j == pytest.approx(r.mean_power_w * r.train_time_s, rel=1e-9)
    assert r.max_raw_power_w >= r.peak_power_w >= r.mean_power_w * 0.98
    assert r.freq_mhz_start == r.freq_mhz_final == 614.4 and r.guard_events == ()
    assert r.eval_wall_s > 0 and r.train_wall_s > 0 and r.resumed_from is None
    # Evaluation's device time: the model's forward passes over the held-out split at
    # the locked clock, once per evaluation, beside (not inside) the training time.
    from undercap.devices.simulated.model import eval_pass_s

    one_pass = eval_pass_s(dev.spec, workload, digits.n_test, 512, 614.4)  # the run's clock
    assert r.eval_time_s == pytest.approx(len(r.curve) * one_pass, rel=1e-9)
    assert 0 < r.eval_time_s < r.train_time_s
    assert r.lr == pytest.approx(1e-3)  # b == b_max: the model's base LR
    # JSON round trip
    path = save_train_result(tmp_path / "r.json", r)
    assert load_train_result(path) == r
    assert json.loads(path.read_text())["schema"] == "undercap.train/1"
    assert any("SIMULATED" in line for line in train_summary(r))


def test_lr_is_sqrt_scaled_from_largest_batch(digits):
    r = train(nano(), digits, batch_size=16, max_batch_size=64, base_lr=2e-3, max_samples=256)
    assert r.lr == pytest.approx(2e-3 * 0.5)
    assert not r.reached and r.time_to_accuracy_s is None and r.samples_trained == 256


def test_guard_steps_down_when_limit_slightly_exceeded(digits, workload):
    dev = nano()
    r = train(
        dev,
        digits,
        freq_mhz=TOP_MHZ,
        power_limit_w=SLIGHT_LIMIT_W,
        target_accuracy=1.0,
        max_samples=1600,
        eval_every_samples=512,
        guard_window_s=0.1,
        sample_rate_hz=200.0,
    )
    assert r.guard_events, "the guard should have acted"
    first = r.guard_events[0]
    assert first["action"] == STEP_DOWN
    assert (first["from_mhz"], first["to_mhz"]) == (TOP_MHZ, 844.8)
    assert all(e["window_mean_w"] > SLIGHT_LIMIT_W for e in r.guard_events)
    assert first["t_s"] >= 0.1  # not before a whole window at the locked clock
    assert r.freq_mhz_start == TOP_MHZ and r.freq_mhz_final < TOP_MHZ
    # it stopped at a clock whose modelled power honours the limit
    assert dev.model_step(workload, 32, r.freq_mhz_final).power_w <= SLIGHT_LIMIT_W
    assert dev.save_state()["locked_freq_mhz"] is None


def test_generous_limit_has_no_events(digits):
    r = train(
        nano(),
        digits,
        freq_mhz=TOP_MHZ,
        power_limit_w=5.0,
        target_accuracy=1.0,
        max_samples=1600,
        eval_every_samples=512,
        guard_window_s=0.1,
    )
    assert r.guard_events == () and not r.limit_exceeded and r.warnings == ()
    assert r.freq_mhz_final == TOP_MHZ and r.peak_power_w < 5.0


def test_guard_stops_at_lowest_frequency_and_restores(digits):
    dev = nano()
    with pytest.raises(InfeasibleError, match="lowest frequency 76.8 MHz"):
        train(
            dev,
            digits,
            freq_mhz=TOP_MHZ,
            power_limit_w=2.0,
            target_accuracy=1.0,
            max_samples=6000,
            eval_every_samples=512,
            guard_window_s=0.1,
        )
    assert dev.save_state()["locked_freq_mhz"] is None


def test_read_only_over_the_cap_steps_the_batch_size_down(digits, capsys):
    """Read-only clocks: the batch size is the knob. b=64 draws ~3.53 W at the top
    clock, b=32 ~3.40 W: under 3.47 W the guard moves to 32 at the next step boundary,
    recorded as a segment and a guard event, with the learning rate re-scaled."""
    dev = nano(read_only=True)
    r = train(
        dev,
        digits,
        batch_size=64,
        max_batch_size=64,
        power_limit_w=3.47,
        target_accuracy=1.0,
        max_samples=3200,
        eval_every_samples=512,
        guard_window_s=0.5,
        batch_ladder=(16, 32, 64),
    )
    first = r.guard_events[0]
    assert (first["action"], first["from_batch_size"], first["to_batch_size"]) == (
        BATCH_DOWN,
        64,
        32,
    )
    assert [s["batch_size"] for s in r.segments][:2] == [64, 32]
    assert sum(s["samples"] for s in r.segments) == r.samples_trained
    assert r.segments[0]["peak_power_w"] > 3.47 > r.segments[1]["peak_power_w"]
    assert r.clocks == "read-only: clocks as found" and r.freq_mhz_final == TOP_MHZ
    assert r.lr == pytest.approx(model_spec("small-cnn").base_lr * (32 / 64) ** 0.5)
    assert "batch size 64 -> 32" in capsys.readouterr().err
    assert any("batch size 64 -> 32" in line for line in train_summary(r))


def test_read_only_with_no_smaller_batch_stops_with_a_checkpoint(digits, tmp_path):
    """Nothing left to step down to: CapExceededError (exit 4) after a checkpoint; a
    clock asked for on a read-only device is not locked, and the result says so."""
    dev = nano(read_only=True)
    with pytest.raises(CapExceededError, match="resume") as e:
        train(
            dev,
            digits,
            batch_size=64,
            power_limit_w=3.2,
            target_accuracy=1.0,
            guard_window_s=0.2,
            batch_ladder=(32, 64),
            checkpoint_dir=tmp_path,
        )
    assert e.value.exit_code == 4
    saved = load_checkpoint(tmp_path)
    assert saved is not None and saved["trainer"]["batch_size"] == 32
    r = train(dev, digits, freq_mhz=614.4, max_samples=64)
    assert r.clocks == "read-only: clocks as found" and r.freq_mhz_requested == 614.4
    assert r.freq_mhz_start == TOP_MHZ and any("clocks as found" in w for w in r.warnings)


class _FakeSampler:
    def __init__(self, mean_w: float) -> None:
        self.mean_w = mean_w

    def window_mean_w(self, window_s: float) -> float:
        return self.mean_w


def test_guard_needs_a_whole_window_and_records_read_only_once():
    dev = nano()
    s = _FakeSampler(10.0)
    g = PowerGuard(dev, s, 5.0, window_s=1.0, start_s=0.0, warn=False)
    assert g.check(0.5, 0.5, 10) is None  # window not yet full at this clock
    ev = g.check(1.0, 1.0, 20)
    assert ev is not None and ev.to_mhz == 844.8 and dev.current_freq_mhz() == 844.8
    assert g.check(1.5, 1.5, 30) is None  # a new window starts after a step-down
    s.mean_w = 4.0
    assert g.check(3.0, 3.0, 40) is None
    ro = PowerGuard(nano(read_only=True), _FakeSampler(10.0), 5.0, window_s=1.0, warn=False)
    assert ro.check(1.0, 1.0, 1).action == READ_ONLY
    assert ro.check(2.0, 2.0, 2) is None and ro.exceeded_windows == 2
    assert len(ro.events) == 1
    assert PowerGuard(dev, s, None).check(100.0, 1.0, 1) is None  # no limit, no guard


def test_checkpoint_refusals_and_finished_resume(digits, tmp_path):
    ck = tmp_path / "ck"
    kw = dict(freq_mhz=614.4, checkpoint_dir=ck, checkpoint_every_samples=64)
    first = train(nano(), digits, **kw)
    state = load_checkpoint(ck)
    assert state["trainer"]["samples"] == first.samples_trained  # final checkpoint
    with pytest.raises(ArtifactError, match="pass --resume"):
        train(nano(), digits, **kw)
    with pytest.raises(ArtifactError, match="different run.*batch_size 32 -> 16"):
        train(nano(), digits, batch_size=16, resume=True, **kw)
    with pytest.raises(ArtifactError, match="no checkpoint"):
        train(nano(), digits, resume=True, **{**kw, "checkpoint_dir": tmp_path / "none"})
    again = train(nano(), digits, resume=True, **kw)  # finished: nothing left to train
    assert again.samples_to_target == first.samples_to_target
    assert again.time_to_accuracy_s == pytest.approx(first.time_to_accuracy_s)
    assert again.energy_j == pytest.approx(first.energy_j)
    assert again.resumed_from == first.samples_trained


def test_checkpoint_write_is_atomic_and_corruption_is_reported(tmp_path):
    import torch

    save_checkpoint(tmp_path, {"config": {"a": 1}, "x": torch.zeros(3)})
    save_checkpoint(tmp_path, {"config": {"a": 2}, "x": torch.ones(3)})
    assert load_checkpoint(tmp_path)["config"] == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temp files left
    checkpoint_path(tmp_path).write_bytes(b"truncated")
    with pytest.raises(ArtifactError, match="delete it to start over"):
        load_checkpoint(tmp_path)


def test_train_result_rejects_wrong_schema():
    with pytest.raises(ArtifactError, match="schema"):
        TrainResult.from_dict({"schema": "undercap.profile/1"})


# --- a real (wall-clock) backend: the Jetson one on a fake L4T tree ----------------------
@pytest.fixture
def jetson(tmp_path, monkeypatch):
    from fakes.sysfs import FakeKernel, build_nano

    from undercap.devices.jetson import JetsonDevice

    monkeypatch.delenv("UNDERCAP_STATE_DIR", raising=False)
    tree = build_nano(tmp_path / "nano")
    kernel = FakeKernel(tree)
    dev = JetsonDevice(tree.root, writer=kernel.write, nvpmodel_runner=None)
    return tree, kernel, dev


def test_wall_clock_device_charges_training_spans_only(digits, jetson):
    import time

    tree, _, dev = jetson
    before = tree.settings()
    board_w = dev.power_w()  # the fake POM_5V_IN rail reads constant power
    t0 = time.monotonic()
    r = train(
        dev,
        digits,
        freq_mhz=614.4,
        power_limit_w=3.0,
        max_samples=1024,
        eval_every_samples=256,
        torch_device="cpu",
    )
    elapsed = time.monotonic() - t0
    assert tree.settings() == before
    assert not r.simulated and r.time_basis == "wall" and r.energy_source == "sampler"
    assert r.freq_mhz_start == 614.4 and r.guard_events == ()
    assert r.mean_power_w == pytest.approx(board_w, rel=1e-6)
    assert r.peak_power_w == pytest.approx(board_w, rel=1e-6)
    # the device-clock spans bracket every step and leave evaluations out
    assert r.train_time_s >= r.train_wall_s > 0
    assert r.train_time_s + r.eval_wall_s <= elapsed


def test_wall_clock_guard_steps_down_to_the_floor_then_stops(digits, jetson):
    tree, kernel, dev = jetson
    before = tree.settings()
    with pytest.raises(InfeasibleError, match="lowest frequency 76.8 MHz"):
        train(
            dev,
            digits,
            freq_mhz=614.4,
            power_limit_w=2.0,
            target_accuracy=1.0,
            max_samples=10**8,
            eval_every_samples=10**6,
            guard_window_s=0.03,
            torch_device="cpu",
        )
    assert tree.settings() == before
    maxes = [int(v) / 1e6 for attr, v in kernel.writes if attr == "max_freq"]
    table = dev.available_freqs_mhz()
    # locked at 614.4, then one step down per window to 76.8, then restored
    assert maxes[:-1] == [f for f in reversed(table) if f <= 614.4]
    assert maxes[-1] == int(before["max_freq"]) / 1e6


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
def test_resume_keeps_guard_state_and_clock(digits, tmp_path, monkeypatch, deterministic):
    """A run stopped after 1024 samples and resumed from its checkpoint: the guard's
    step-down and the clock carry over, and the curve equals the uninterrupted run's
    by the rule of resume_match.py: bit for bit on the CPU or with `deterministic`
    (on any torch device), else within the run-to-run spread (CUDA's kernels may add
    in another order from run to run)."""
    from resume_match import assert_resumed_matches, exact_expected

    from undercap.train.loop import Trainer
    from undercap.train.loop.repro import CUBLAS_WORKSPACE_CONFIG

    # deterministic sets it for the process where unset: put back as it was afterwards
    monkeypatch.setenv(
        "CUBLAS_WORKSPACE_CONFIG",
        os.environ.get("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG),
    )
    kw = dict(freq_mhz=TOP_MHZ, power_limit_w=SLIGHT_LIMIT_W, target_accuracy=1.0,
              max_samples=1600, eval_every_samples=512, guard_window_s=0.1,
              sample_rate_hz=200.0, deterministic=deterministic)  # fmt: skip
    full = train(nano(), digits, **kw)
    step = Trainer.step

    def dying_step(self):
        if self.samples >= 1024:
            raise RuntimeError("killed")
        step(self)

    ck = tmp_path / "ck"
    monkeypatch.setattr(Trainer, "step", dying_step)
    with pytest.raises(RuntimeError, match="killed"):
        train(nano(), digits, checkpoint_dir=ck, checkpoint_every_samples=256, **kw)
    monkeypatch.setattr(Trainer, "step", step)
    dev = nano()
    r = train(dev, digits, checkpoint_dir=ck, checkpoint_every_samples=256, resume=True, **kw)
    assert r.resumed_from == 1024 and dev.save_state()["locked_freq_mhz"] is None
    assert r.config["deterministic"] is deterministic
    # the step-down before the kill is kept, and the resumed part ran at the guarded clock
    assert r.guard_events == full.guard_events
    assert (r.freq_mhz_start, r.freq_mhz_final) == (TOP_MHZ, full.freq_mhz_final)
    exact = exact_expected(r.config["torch_device"], deterministic)
    again = None if exact else train(nano(), digits, **kw)  # the run-to-run spread
    assert_resumed_matches(r, full, exact=exact, n_eval=digits.n_test, target=None, again=again)
    assert r.samples_trained == full.samples_trained
    assert r.train_time_s == pytest.approx(full.train_time_s, rel=1e-9)
    assert r.energy_j == pytest.approx(full.energy_j, rel=0.02)
