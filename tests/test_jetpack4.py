"""JetPack 4.6 (Jetson Nano, TX2, TX2 NX): Python 3.6 with torch 1.10 runs the device
side, the server stays on Python >= 3.8 (issue 37; tests/device_path.py says which
modules). These run on every Python: on 3.6 (scripts/ci/jetpack4.sh, from the built
wheel) they show the device path imports there; on the server's Python they check the
path's definition, vermin's 3.6 floor over it and, where UNDERCAP_JP4_PYTHON names a
3.6 interpreter with undercap installed, that artifacts round-trip between the two.
"""

import ast
import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
from device_path import (
    DEVICE_TESTS,
    MODULES,
    device_path,
    device_path_files,
    device_test_files,
    server_command_modules,
)
from guides import blocks, commands

from undercap._compat import run_captured
from undercap.cli import SERVER_COMMAND_MODULES, main, server_command_refusal

REPO = Path(__file__).resolve().parents[1]
BOARD_PYTHON = os.environ.get("UNDERCAP_JP4_PYTHON")  # relative: to where pytest started


def test_the_device_path_reaches_the_device_side_and_stops_short_of_the_server() -> None:
    path = set(device_path())
    device = {
        "undercap.devices.jetson.power",  # INA3221 readings
        "undercap.devices.jetson.devfreq",  # sysfs clock control
        "undercap.devices.simulated.model",
        "undercap.devices.state",  # restore
        "undercap.profile.sweep",
        "undercap.train.runner",  # loaded lazily (undercap.train's PEP 562 table)
        "undercap.train.session.guard",
        "undercap.train.checkpoint",
        "undercap.select.core",  # a changing cap re-selects on the board
        "undercap.models.small_cnn",  # named by the model registry
    }
    assert device <= path, device - path
    server = {"undercap.cli.select", "undercap.cli.estimate", "undercap.cli.recipes"}
    server |= {"undercap.recipes.run", "undercap.recipes.compare", "undercap.fleet"}
    assert not path & server
    assert server_command_modules() == set(SERVER_COMMAND_MODULES)


def test_every_device_path_module_imports_on_this_python() -> None:
    for name in device_path():
        if not name.endswith("__main__"):  # that one runs the CLI
            importlib.import_module(name)


def test_device_tests_import_only_the_device_path_at_module_level() -> None:
    path = set(device_path())
    outside = []
    for name in DEVICE_TESTS:
        for node in ast.parse((REPO / "tests" / name).read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("undercap"):
                targets = [f"{node.module}.{a.name}" for a in node.names]
                mods = [t for t in targets if t in MODULES] or [node.module]
                outside += [f"{name}: {m}" for m in mods if m not in path]
    assert outside == []


def test_a_server_command_on_a_board_python_is_one_line() -> None:
    line = server_command_refusal(["--debug", "compare", "--seeds", "5"], (3, 6, 9))
    assert line.startswith("`undercap compare` runs on a server with Python >= 3.8")
    assert "Python 3.6.9" in line and "`undercap devices`, `restore`, `profile`" in line
    assert server_command_refusal(["profile", "--device", "sim:jetson-nano"], (3, 6, 9)) == ""
    assert server_command_refusal(["compare"], (3, 8, 0)) == ""


@pytest.mark.skipif(sys.version_info >= (3, 8), reason="the refusal itself: a board's Python")
def test_a_server_command_here_exits_2_with_one_line(capsys) -> None:
    assert main(["estimate", "--proxy", "digits"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: `undercap estimate` runs on")


@pytest.mark.server
def test_server_commands_are_named_as_their_modules_register_them() -> None:
    import argparse

    for module, names in SERVER_COMMAND_MODULES.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert tuple(sub.choices) == names, module


@pytest.mark.server
def test_vermin_says_python_3_6_for_the_device_path() -> None:
    vermin = shutil.which("vermin") or str(Path(sys.executable).with_name("vermin"))
    if not Path(vermin).exists():
        pytest.skip("vermin is not installed (make test installs it)")
    files = [str(p) for p in device_path_files() + device_test_files()]
    args = [vermin, "-q", "-t=3.6-", "--backport", "dataclasses", "--violations", "--no-tips"]
    proc = run_captured([*args, *files], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.server  # the standard library's side needs Python 3.8
def test_the_3_6_fallbacks_compute_what_the_standard_library_does() -> None:
    import math
    import statistics

    from undercap import _compat

    for p in (1e-12, 1e-6, 0.01, 0.2, 0.5, 0.6, 0.975, 1 - 1e-9):
        assert _compat._as241_inv_cdf(p) == statistics.NormalDist().inv_cdf(p)  # novermin
    xs = [0.1, 0.2, 0.3, 1e-17, 5.5]
    assert _compat._fmean(xs) == statistics.fmean(xs)  # novermin
    assert _compat._prod([3, 4, 5]) == math.prod([3, 4, 5]) == 60  # novermin
    with _compat._nullcontext(7) as seven:
        assert seven == 7


def _undercap(python: str, *argv: str, cwd: Path) -> "subprocess.CompletedProcess[str]":
    return _shell(python, "undercap " + " ".join(shlex.quote(a) for a in argv), cwd)


def _shell(python: str, command: str, cwd: Path) -> "subprocess.CompletedProcess[str]":
    """A command line of a page, its `undercap` the given Python's (redirections kept)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    script = f'undercap() {{ "{python}" -m undercap.cli "$@"; }}; {command}'
    proc = run_captured(["bash", "-c", script], cwd=str(cwd), env=env, timeout=600, check=False)
    assert proc.returncode == 0, f"{command[:60]}: {proc.stderr[-2000:]}"
    return proc


def _round_trip_on_the_jetson_page() -> "List[Tuple[str, str]]":
    """(side, command) of the page's JetPack 4.6 round trip, with the simulated Nano for
    the board (`--device jetson`) and no sudo: what a reader runs, as CI can."""
    text = (REPO / "docs" / "guides" / "jetson.md").read_text(encoding="utf-8")
    (block,) = [b for b in blocks(text) if b.marker == "jetpack4 round trip"]
    out = []
    for c in commands(block.body):
        side = "board" if "on the board" in c.heading else "server"
        line = c.line.replace('sudo "$(command -v undercap)"', "undercap")
        line = line.replace("--device jetson", "--device sim:jetson-nano --no-progress")
        assert line.startswith("undercap ") and "jetson " not in line.replace("sim:", ""), line
        out.append((side, line))
    return out


@pytest.mark.server
@pytest.mark.skipif(not BOARD_PYTHON, reason="UNDERCAP_JP4_PYTHON names no Python 3.6 install")
def test_the_jetson_pages_round_trip_between_a_board_and_a_server(tmp_path: Path) -> None:
    """The JetPack 4.6 round trip of guides/jetson.md, command by command: the board's
    (Python 3.6) profile selects on the server, the selection trains on the board, the
    board's train result reads back on the server."""
    from undercap.artifacts import load_profile
    from undercap.artifacts.train_result import load_train_result
    from undercap.report.text import train_summary

    board, server = os.path.abspath(str(BOARD_PYTHON)), sys.executable
    steps = _round_trip_on_the_jetson_page()
    assert [side for side, _ in steps] == ["board", "server", "server", "board"]
    for side, line in steps:
        _shell(board if side == "board" else server, line, tmp_path)
    profile = load_profile(tmp_path / "profile.json")
    assert profile.provenance["python"].startswith("3.6") and profile.rows
    chosen = json.loads((tmp_path / "selection.json").read_text())
    result = load_train_result(tmp_path / "train.json")
    assert result.reached and result.simulated and result.peak_power_w <= 3.5
    assert result.batch_size == chosen["batch_size"] in profile.batch_sizes
    assert result.provenance["python"].startswith("3.6")
    assert any("time to" in line for line in train_summary(result))


def test_the_round_trip_on_the_jetson_page_is_the_one_ci_runs() -> None:
    sides = [side for side, _ in _round_trip_on_the_jetson_page()]
    assert sides == ["board", "server", "server", "board"]


@pytest.mark.server
@pytest.mark.skipif(not BOARD_PYTHON, reason="UNDERCAP_JP4_PYTHON names no Python 3.6 install")
def test_artifacts_round_trip_between_a_board_and_a_server(tmp_path: Path) -> None:
    """A profile made on the board (Python 3.6) selects on the server; the selection a
    server's `run` wrote trains on the board; the board's train result reads back."""
    from undercap.artifacts import load_profile
    from undercap.artifacts.selection import load_selection
    from undercap.artifacts.train_result import load_train_result
    from undercap.report.text import train_summary

    board, server = os.path.abspath(str(BOARD_PYTHON)), sys.executable
    nano = ("--device", "sim:jetson-nano", "--torch-device", "cpu", "--no-progress")
    _undercap(board, "profile", *nano, "--model", "small-cnn", "--batch-sizes", "8..64",
              "-o", "board-profile.json", cwd=tmp_path)  # fmt: skip
    profile = load_profile(tmp_path / "board-profile.json")
    assert profile.provenance["python"].startswith("3.6") and profile.rows

    _undercap(server, "run", *nano, "--model", "small-cnn", "--proxy", "digits",
              "--proxy-limit", "360", "--proxy-split-seed", "1", "--target", "digits",
              "--batch-sizes", "8..64", "--target-accuracy", "0.8", "--max-samples", "4000",
              "--eval-every", "128", "--estimate-seeds", "1", "--power-limit", "3.5",
              "--cache-dir", "cache", "-o", "run", cwd=tmp_path)  # fmt: skip
    out = _undercap(server, "select", "--profile", "board-profile.json", "--efficiency",
                    "run/efficiency.json", "--power-limit", "3.5", "--json",
                    cwd=tmp_path).stdout  # fmt: skip
    chosen = json.loads(out)
    assert chosen["batch_size"] in profile.batch_sizes and chosen["peak_power_w"] <= 3.5

    _undercap(board, "train", "--from-selection", "run/selection.json", *nano,
              "--checkpoint-dir", "ckpt", "-o", "board-train.json", cwd=tmp_path)  # fmt: skip
    result = load_train_result(tmp_path / "board-train.json")
    selection = load_selection(tmp_path / "run" / "selection.json")
    assert result.reached and result.simulated and result.peak_power_w <= 3.5
    assert result.batch_size == selection.batch_size
    assert result.provenance["python"].startswith("3.6")
    assert any("time to" in line for line in train_summary(result))
