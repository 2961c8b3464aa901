"""Read-only, all the way: `run`, `train --from-selection` and `capped()` finish at the
clocks as found on NVML's default mode (the fake pynvml: a GPU at 1980 MHz that refuses
locks) and on a Jetson tree with --read-only, never lock, and say so in their output and
artifacts; control asked for but refused is one line before any work."""

import json
import sys
from pathlib import Path
from typing import List

import pytest
from fakes import pynvml as fake
from fakes.pynvml import FakeGpu
from fakes.sysfs import build_nano

from undercap.cli import main

LOCK_CALLS = ("nvmlDeviceSetGpuLockedClocks",)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: r(b) on the proxy is estimated once."""
    return tmp_path_factory.mktemp("cache")


def quick(cache: Path, *extra: str) -> List[str]:
    return [
        "--model", "small-cnn", "--batch-sizes", "16,64", "--max-samples", "1500",
        "--eval-every", "128", "--torch-device", "cpu", "--no-progress",
        "--proxy", "digits", "--proxy-limit", "300", "--target", "digits",
        "--target-limit", "600", "--target-accuracy", "0.6", "--estimate-seeds", "1",
        "--cache-dir", str(cache), *extra,
    ]  # fmt: skip


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    """The fake NVML with one GPU that runs at 1980 MHz and refuses clock locks (not
    root), as NVML's default read-only mode meets a desktop GPU."""
    monkeypatch.delenv("UNDERCAP_STATE_DIR", raising=False)
    (g,) = fake.reset([FakeGpu(idle_clock=1980, can_lock=False)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return g


def locks(g: FakeGpu) -> List[str]:
    return [name for name, _ in g.calls if name in LOCK_CALLS]


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_run_on_nvml_default_mode_finishes_without_a_lock(gpu, cache, tmp_path, capsys):
    """No --read-only: NVML is read-only unless --allow-clock-control. The efficient
    run profiles in two stages; both measure at 1980 MHz (one row per batch size)."""
    out = tmp_path / "run"
    args = ["run", "--device", "nvml:0", "--power-limit", "300", *quick(cache), "-o", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    profile = json.loads((out / "profile.json").read_text())
    selection = json.loads((out / "selection.json").read_text())
    train = json.loads((out / "train.json").read_text())
    assert profile["mode"] == "read-only"
    assert sorted(r["batch_size"] for r in profile["rows"]) == [16, 64]
    assert {r["freq_mhz"] for r in profile["rows"]} == {1980.0}
    assert selection["clock"] == "observed" and selection["freq_mhz"] == 1980.0
    assert train["clocks"] == "read-only: clocks as found" and train["reached"]
    assert train["freq_mhz_requested"] is None
    assert "clocks: read-only: clocks as found" in printed and "observed" in printed
    assert locks(gpu) == []


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_train_from_a_selection_chosen_with_control_on_a_read_only_gpu(
    gpu, cache, tmp_path, capsys
):
    """A selection whose clock was chosen on a device with control (the simulated
    Nano) trains on a read-only GPU at the clocks as found, with one line saying so."""
    sim = tmp_path / "sim"
    args = ["run", "--device", "sim:jetson-nano", "--power-limit", "3.5", *quick(cache)]
    assert main([*args, "-o", str(sim)]) == 0
    chosen = json.loads((sim / "selection.json").read_text())
    assert chosen["clock"] == "chosen"
    out = tmp_path / "train.json"
    cmd = ["train", "--device", "nvml:0", "--from-selection", str(sim / "selection.json")]
    assert main([*cmd, "--power-limit", "300", "--no-progress", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{chosen['freq_mhz']:g} MHz was chosen on a device with clock control" in err
    assert "training at the clocks as found (1980 MHz now)" in err
    result = json.loads(out.read_text())
    assert result["clocks"] == "read-only: clocks as found"
    assert result["freq_mhz_requested"] == chosen["freq_mhz"]
    assert any("clocks as found" in w for w in result["warnings"])
    assert locks(gpu) == []
    # an explicit --freq-mhz asks for a lock: one line before the data loads
    assert main([*cmd, "--freq-mhz", "900", "--no-progress"]) == 2
    assert "drop --freq-mhz" in capsys.readouterr().err


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_control_asked_for_but_refused_is_one_line_before_any_work(gpu, cache, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", "--device", "nvml:0", "--allow-clock-control", "--power-limit", "300"]
    assert main([*args, *quick(cache), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "leave out --allow-clock-control" in err and "Insufficient Permissions" in err
    assert not (out / "profile.json").exists()


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_run_on_a_jetson_tree_with_read_only_writes_nothing(cache, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("UNDERCAP_STATE_DIR", raising=False)
    tree = build_nano(tmp_path / "nano")
    before = {p: p.read_bytes() for p in tree.devfreq.iterdir() if p.is_file()}
    out = tmp_path / "run"
    dev = ["--device", "jetson", "--sysfs-root", str(tree.root), "--read-only"]
    # the fake rails read ~5 W of board power: a cap above it
    assert main(["run", *dev, "--power-limit", "20", *quick(cache), "-o", str(out)]) == 0
    assert {p: p.read_bytes() for p in before} == before
    train = json.loads((out / "train.json").read_text())
    selection = json.loads((out / "selection.json").read_text())
    assert selection["clock"] == "observed"
    assert train["clocks"] == "read-only: clocks as found" and train["reached"]
    assert "read-only: clocks as found" in capsys.readouterr().out


def test_jetson_without_write_permission_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    import undercap.devices.jetson.device as jetson_device

    tree = build_nano(tmp_path / "nano")
    monkeypatch.setattr(jetson_device, "can_write", lambda path: False)  # not root
    args = ["profile", "--device", "jetson", "--sysfs-root", str(tree.root)]
    out = tmp_path / "profile.json"
    assert main([*args, "--model", "small-cnn", "--no-progress", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--read-only" in err and "root" in err
    assert not out.exists()


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_capped_on_a_read_only_gpu_uses_the_clocks_as_found(gpu, tmp_path):
    """capped() with a selection whose clock was chosen: not locked, one line, and the
    result says read-only."""
    from undercap import capped, open_device
    from undercap.artifacts.selection import Selection

    sel = Selection("ours", 32, 1500.0, 1e-4, 250.0, 300.0, "small-cnn", "sim", False)
    with open_device("nvml:0") as device, capped(device, sel, target_accuracy=0.5) as cap:
        for _ in range(3):
            cap.step(cap.batch_size)
        with cap.paused():
            pass
        cap.report(0.6)
    result = cap.result()
    assert result.clocks == "read-only: clocks as found" and result.reached
    assert any("1500 MHz was chosen" in w for w in result.warnings)
    assert locks(gpu) == []


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_compare_on_nvml_default_mode_finishes_without_a_lock(gpu, cache, tmp_path, capsys):
    """Every configuration of `compare` (ours, both baselines, the oracle) trains at the
    clocks as found; no line claims a clock was chosen with control."""
    args = quick(cache, "--seeds", "1", "--power-limits", "300", "-o", str(tmp_path / "c"))
    assert main(["compare", "--device", "nvml:0", *args]) == 0, capsys.readouterr().err
    assert "chosen on a device with clock control" not in capsys.readouterr().err
    assert locks(gpu) == []


def test_train_over_the_cap_with_nothing_left_exits_4_with_a_checkpoint(tmp_path, capsys):
    """A read-only device over its cap at the smallest batch size: exit 4, one line that
    names the checkpoint, and the checkpoint is there."""
    from undercap.errors import EXIT_CAP_EXCEEDED

    ckpt = tmp_path / "ckpt"
    args = ["train", "--device", "sim:jetson-nano", "--read-only", "--model", "small-cnn",
            "--dataset", "digits", "--limit", "600", "--batch-size", "4", "--power-limit",
            "3.0", "--target-accuracy", "0.99", "--guard-window-s", "0.2", "--torch-device",
            "cpu", "--no-progress", "--checkpoint-dir", str(ckpt)]  # fmt: skip
    assert main(args) == EXIT_CAP_EXCEEDED == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert "batch size 4 -> 2" in "\n".join(err) and err[-1].startswith("error: power limit 3 W")
    assert f"in {ckpt}" in err[-1] and "--resume" in err[-1]
    assert (ckpt / "checkpoint.pt").is_file()
