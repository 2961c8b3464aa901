"""Profiler: full and efficient sweeps on a simulated Nano with the real small CNN."""

import json

import pytest

from undercap.artifacts import load_profile, save_profile
from undercap.devices import open_device
from undercap.profile import ProfileSettings, run_profile

FAST = ProfileSettings(warmup_steps=1, measure_steps=2, sample_rate_hz=200.0)


@pytest.fixture
def nano():
    return open_device("sim:jetson-nano", seed=0)


def test_full_sweep_covers_grid_and_restores_clock(nano, tmp_path):
    before = nano.save_state()
    prof = run_profile(nano, "small-cnn", (3, 32, 32), [8, 32], settings=FAST, progress=False)
    freqs = nano.available_freqs_mhz()
    assert len(prof.rows) == 2 * len(freqs)
    assert prof.simulated and prof.mode == "full"
    assert nano.save_state() == before
    # physics the selection relies on: faster and hungrier at higher f, cheaper per
    # sample at larger b
    for b in (8, 32):
        rows = [prof.row(b, f) for f in freqs]
        assert rows[-1].time_per_sample_s < rows[0].time_per_sample_s
        assert rows[-1].peak_power_w > rows[0].peak_power_w
    assert prof.row(32, freqs[-1]).time_per_sample_s < prof.row(8, freqs[-1]).time_per_sample_s
    assert prof.cost["device_time_s"] > 0 and prof.cost["energy_j"] > 0
    assert prof.workload["flops_per_sample"] > 0
    path = save_profile(tmp_path / "p.json", prof)
    assert load_profile(path).rows == prof.rows


def test_efficient_sweep_measures_fewer_configs_and_finds_same_boundary(nano):
    full = run_profile(nano, "small-cnn", (3, 32, 32), [8, 32, 128], settings=FAST, progress=False)
    limit = sorted(r.peak_power_w for r in full.rows)[len(full.rows) // 2]
    eff = run_profile(
        nano,
        "small-cnn",
        (3, 32, 32),
        [8, 32, 128],
        power_limit_w=limit,
        settings=FAST,
        progress=False,
    )
    assert eff.mode == "efficient" and len(eff.rows) < len(full.rows)

    def best_feasible(prof, b):
        return max(
            (r.freq_mhz for r in prof.rows if r.batch_size == b and r.peak_power_w <= limit),
            default=None,
        )

    # Sensor noise may move a borderline point by one step, not more.
    freqs = nano.available_freqs_mhz()
    for b in (8, 32, 128):
        fb, eb = best_feasible(full, b), best_feasible(eff, b)
        if fb is None or eb is None:  # infeasible in one: at most the lowest step in the other
            other = fb if eb is None else eb
            assert other is None or freqs.index(other) == 0
        else:
            assert abs(freqs.index(fb) - freqs.index(eb)) <= 1


def test_batches_that_do_not_fit_are_reported(nano):
    prof = run_profile(
        nano,
        "resnet18",
        (3, 32, 32),
        [8, 1 << 16],
        freqs_mhz=[921.6],
        settings=ProfileSettings(host_steps=False, measure_steps=1, warmup_steps=0),
        progress=False,
    )
    assert prof.unfit_batch_sizes == (1 << 16,)
    assert prof.batch_sizes == (8,)


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_plot_profile_cli_marks_choice_and_given_safe_frequency(nano, tmp_path):
    from undercap.artifacts import Efficiency, save_efficiency
    from undercap.cli import main

    prof = run_profile(
        nano,
        "small-cnn",
        (3, 32, 32),
        [8, 32],
        progress=False,
        settings=ProfileSettings(host_steps=False, warmup_steps=0, measure_steps=1),
    )
    save_profile(tmp_path / "p.json", prof)
    eff = Efficiency("small-cnn", "digits", 0.9, {8: (100,), 32: (200,)}, {8: 0.5, 32: 1.0})
    save_efficiency(tmp_path / "e.json", eff)
    limit = str(max(r.peak_power_w for r in prof.rows))
    args = [
        "plot-profile",
        str(tmp_path / "p.json"),
        "--power-limit",
        limit,
        "--efficiency",
        str(tmp_path / "e.json"),
        "-o",
        str(tmp_path / "f.png"),
    ]
    assert main([*args, "--safe-freq-mhz", "76.8"]) == 0
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args[:-4], "-o", str(tmp_path / "g.png")]) == 0  # no choice marked


def test_measurement_is_adaptive_and_warm_up_is_per_batch_size(nano):
    """At least PROFILE_MIN_WINDOWS power windows and two steps per configuration,
    one warm-up per batch size, exact time per sample from the device model."""
    from undercap.devices.base import power_window_s
    from undercap.models import build_model, workload_of

    settings = ProfileSettings(host_steps=False)
    prof = run_profile(nano, "resnet18", (3, 32, 32), [4, 64], settings=settings, progress=False)
    assert prof.cost["warmup_steps"] == 2  # one per batch size, none per clock
    assert prof.cost["saved"]["warmup_steps_shared"] == len(prof.rows) - 2
    window = power_window_s(nano)
    assert prof.sweep["window_s"] == window == pytest.approx(0.2)
    wl = workload_of(
        build_model("resnet18", num_classes=10, input_shape=(3, 32, 32)), "resnet18", (3, 32, 32)
    )
    for r in prof.rows:
        assert r.steps >= 2 and r.duration_s >= settings.min_windows * window - 1e-9
        step = nano.model_step(wl, r.batch_size, r.freq_mhz)
        assert r.time_per_sample_s == pytest.approx(step.time_per_sample_s, rel=1e-9)
        assert r.steps <= 4  # long steps: the intervals close after a few
        assert 0 < r.peak_margin_w < 0.5 and r.noise_w > 0
    steps = sum(r.steps for r in prof.rows) + prof.cost["warmup_steps"]
    assert prof.cost["steps"] == steps


def test_efficient_sweep_cost_and_pruning_with_r(nano, tmp_path, capsys):
    """ResNet18 b = 4..128 under 5 W on the simulated Nano: the efficient sweep costs
    about 1% of the paper's 4454 s of training (Table 2); with r(b) it skips batch sizes
    that cannot win and still picks Algorithm 1's choice on the full table."""
    from undercap.artifacts import Efficiency, save_efficiency
    from undercap.cli import main
    from undercap.select import select_ours

    settings = ProfileSettings(host_steps=False)
    bs = [4, 8, 16, 32, 64, 128]
    eff = run_profile(
        nano, "resnet18", (3, 32, 32), bs, power_limit_w=5.0, settings=settings, progress=False
    )
    assert eff.mode == "efficient" and eff.cost["device_time_s"] < 85.0
    assert eff.cost["saved"]["configurations_not_measured"] > 50
    rel = {4: 0.3, 8: 0.31, 16: 0.33, 32: 0.4, 64: 0.6, 128: 1.0}
    pruned = run_profile(
        nano,
        "resnet18",
        (3, 32, 32),
        bs,
        power_limit_w=5.0,
        settings=settings,
        progress=False,
        relative=rel,
    )
    assert pruned.sweep["pruned"] and pruned.cost["device_time_s"] < eff.cost["device_time_s"]
    full = run_profile(nano, "resnet18", (3, 32, 32), bs, settings=settings, progress=False)
    want = select_ours(full, rel, 5.0)
    for p in (eff, pruned):
        got = select_ours(p, rel, 5.0)
        assert (got.batch_size, got.freq_mhz) == (want.batch_size, want.freq_mhz)
    # the CLI: --efficiency prunes, the summary reports cost and margins
    save_efficiency(
        tmp_path / "e.json", Efficiency("resnet18", "x", 0.9, {b: (1,) for b in rel}, rel)
    )
    out = tmp_path / "p.json"
    argv = ["profile", "--model", "resnet18", "--batch-sizes", "4..128", "--power-limit", "5",
            "--efficiency", str(tmp_path / "e.json"), "--no-progress", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "s device time" in text and "skipped:" in text and "safety margin" in text
    assert load_profile(out).sweep["relative"] == {str(b): r for b, r in rel.items()}
    assert main([*argv[:-2], "--full", "-o", str(out)]) == 2  # pruning needs the limit's sweep


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_run_profiles_in_two_stages_and_reports_the_cost(tmp_path, capsys):
    """`run` measures the smallest batch size first (a limit nothing meets fails there,
    before any estimate), then the rest with r(b); the profile's cost covers both and
    is set against the training that followed."""
    from undercap.artifacts import Efficiency, save_efficiency
    from undercap.cli import main

    rel = {16: 0.4, 32: 0.6, 64: 1.0}
    save_efficiency(
        tmp_path / "e.json", Efficiency("small-cnn", "digits", 0.9, {b: (100,) for b in rel}, rel)
    )
    out = tmp_path / "run"
    argv = ["run", "--model", "small-cnn", "--target", "digits", "--target-limit", "600",
            "--efficiency", str(tmp_path / "e.json"), "--batch-sizes", "16..64",
            "--power-limit", "3.5", "--target-accuracy", "0.8", "--max-samples", "2000",
            "--eval-every", "256", "--torch-device", "cpu", "--no-progress",
            "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    prof = load_profile(out / "profile.json")
    assert prof.mode == "efficient" and prof.sweep["relative"] == {
        str(b): r for b, r in rel.items()
    }
    assert prof.cost["reused_configurations"] >= 1  # stage 1's rows, not measured again
    sel = json.loads((out / "selection.json").read_text())
    cost = sel["profiling_cost"]
    assert cost["device_time_s"] == pytest.approx(prof.cost["device_time_s"])
    train = json.loads((out / "train.json").read_text())
    assert cost["fraction_of_training_time"] == pytest.approx(
        prof.cost["device_time_s"] / (train["time_to_accuracy_s"] or train["train_time_s"])
    )
    assert "profiling cost:" in (out / "summary.md").read_text()
    assert sel["power_margin_w"] > 0 and sel["peak_power_w"] + sel["power_margin_w"] <= 3.5
