"""The fleet on a real Flower deployment, over loopback: a SuperLink, two SuperNodes
(simulated Jetsons under their own caps, given by --node-config) and `flwr run` of
examples/fleet-app, as docs/guides/fleet.md says. The global model reaches its target, the
SuperLink writes the results folder, every node's peak stays under its own cap, and
every process started here is stopped (marked slow: about 50 s on 2 cores). Needs
the `fleet` extra."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

pytest.importorskip("flwr")
pytest.importorskip("sklearn")

APP = Path(__file__).resolve().parents[1] / "examples" / "fleet-app"
NODES = [  # (node config, cap)
    ("device='sim:jetson-nano' power-limit-w=3.5 partition-id=0 num-partitions=2 name='nano'", 3.5),
    ("device='sim:jetson-tx2nx' power-limit-w=4.2 partition-id=1 num-partitions=2 name='tx2'", 4.2),
]
FLEET = '[[node]]\ndevice = "sim:jetson-nano"\npower_limit_w = 3.5\ncount = 2\n'  # the count
REL = {16: 0.5, 64: 1.0}  # r(b) of small-cnn on the digits to 80% (undercap estimate)
START_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 420.0


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name  # the venv's, when pytest runs from it
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} not found (the fleet extra installs it)")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"nothing listening on 127.0.0.1:{port} after {START_TIMEOUT_S:g} s")


def _descendants(pids: List[int]) -> List[int]:
    """Every live process below `pids` (Linux /proc; elsewhere none)."""
    children: Dict[int, List[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], list(pids)
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _stop(procs: List[subprocess.Popen]) -> None:
    """SIGTERM every started process group and every descendant (the SuperLink starts
    its SuperExec in a session of its own), then SIGKILL what is left after 15 s."""
    pids = [p.pid for p in procs]
    targets = pids + _descendants(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):  # each in a session of its own
                    os.killpg(p.pid, sig)
        for pid in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            for p in procs:
                p.poll()
            if all(p.returncode is not None for p in procs) and not _alive(targets):
                return
            time.sleep(0.2)


def _alive(pids: List[int]) -> List[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _write_app(app: Path) -> None:
    """The shipped app, with its fleet file and r(b) beside it."""
    app.mkdir()
    for name in ("pyproject.toml", "undercap_fleet_app.py"):
        shutil.copy(APP / name, app / name)
    (app / "fleet.toml").write_text(FLEET)
    eff = {
        "schema": "undercap.efficiency/1",
        "model": "small-cnn",
        "dataset": "digits",
        "target_accuracy": 0.8,
        "samples_to_target": {str(b): [int(1024 * r)] for b, r in REL.items()},
        "relative": {str(b): r for b, r in REL.items()},
    }
    (app / "efficiency.json").write_text(json.dumps(eff))


def test_run_config_paths_are_read_from_the_app_folder(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`flwr run` ships the app folder to the SuperLink, whose working directory is
    elsewhere: relative fleet-file and efficiency paths are the app folder's."""
    from undercap.fleet.config import from_run_config

    _write_app(tmp_path / "app")
    monkeypatch.chdir(tmp_path)
    run_config = {"fleet-file": "fleet.toml", "efficiency": "efficiency.json", "model": "small-cnn"}
    cfg = from_run_config(run_config, tmp_path / "app")
    assert len(cfg.fleet.nodes) == 2 and cfg.relative == REL
    assert cfg.efficiency_source == str(tmp_path / "app" / "efficiency.json")
    with pytest.raises(Exception, match="does not exist"):
        from_run_config(run_config)  # the working directory has neither


@pytest.mark.slow
def test_flwr_run_on_a_loopback_superlink_and_supernodes(tmp_path: Path) -> None:
    superlink, supernode, flwr = (
        _tool(n) for n in ("flower-superlink", "flower-supernode", "flwr")
    )
    app = tmp_path / "app"
    _write_app(app)
    link_port = _free_port()
    home, flwr_home, server, logs = (tmp_path / d for d in ("home", "flwr", "server", "logs"))
    for d in (home, flwr_home, server, logs):
        d.mkdir()
    (flwr_home / "config.toml").write_text(
        '[superlink]\ndefault = "loopback"\n\n'
        f'[superlink.loopback]\naddress = "127.0.0.1:{link_port}"\ninsecure = true\n'
    )
    env = dict(os.environ)
    env.update(
        HOME=str(home),  # nothing touches the user's ~/.flwr
        FLWR_HOME=str(flwr_home),
        FLWR_TELEMETRY_ENABLED="0",  # loopback only
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",  # undercap is installed here
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    procs: List[subprocess.Popen] = []

    def start(name: str, argv: List[str]) -> subprocess.Popen:
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the test
        p = subprocess.Popen(
            argv,
            cwd=server,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        procs.append(p)
        return p

    t0 = time.monotonic()
    try:
        link = start(
            "superlink",
            [superlink, "--insecure", "--host", "127.0.0.1", "--port", str(link_port)]
            + ["--disable-runtime-dependency-installation"],
        )
        _wait_listening(link_port, link, logs / "superlink.log")
        for k, (node_config, _) in enumerate(NODES):
            port = _free_port()
            node = start(
                f"supernode-{k}",
                [supernode, "--insecure", "--superlink", f"127.0.0.1:{link_port}"]
                + ["--host", "127.0.0.1", "--port", str(port), "--node-config", node_config],
            )
            _wait_listening(port, node, logs / f"supernode-{k}.log")
        run = start(
            "flwr-run",
            [flwr, "run", str(app), "loopback", "--stream"]
            + ["--run-config", "target-accuracy=0.8 max-rounds=8"],
        )
        try:
            rc = run.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"flwr run took over {RUN_TIMEOUT_S:g} s:\n{_tail(logs)}")
        out = server / "fleet-out"  # the default out-dir, under the SuperLink's directory
        deadline = time.monotonic() + 30.0
        while not (out / "summary.md").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert rc == 0 and (out / "fleet.json").exists(), _tail(logs)
        wall_s = time.monotonic() - t0
    finally:
        _stop(procs)
    assert not _alive([p.pid for p in procs]), "a Flower process outlived the test"

    result = json.loads((out / "fleet.json").read_text())
    rounds = result["rounds"]
    assert result["reached"] and rounds[-1]["accuracy"] >= 0.8 and result["cap_violations"] == 0
    assert result["simulated"] and result["config"]["target_accuracy"] == 0.8
    caps = {"nano": 3.5, "tx2": 4.2}  # the nodes as their --node-config named them
    assert [n["name"] for n in result["fleet"]["nodes"]] == list(caps)
    for r in rounds:
        assert sorted(n["name"] for n in r["nodes"]) == sorted(caps)
        for n in r["nodes"]:
            assert n["power_limit_w"] == caps[n["name"]]
            assert 0 < n["peak_power_w"] <= caps[n["name"]]
            assert not n["limit_exceeded"]
    for name in ("rounds.csv", "nodes.csv", "summary.md"):
        assert (out / name).exists()
    assert "left out" not in (out / "summary.md").read_text()
    print(f"deployment: {len(rounds)} round(s), {wall_s:.1f} s wall")


def _tail(logs: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-2000:]}" for p in sorted(logs.glob("*.log")))
