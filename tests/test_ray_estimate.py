"""`undercap estimate --executor ray` (estimate/ray_executor.py): the same N(b) as the
local pool on a local Ray and on a real two-node Ray cluster on loopback; a worker
killed mid-run loses nothing; a killed driver resumes from the cache; a bad address
is one error line; the light install never imports Ray.

The cluster is started here (`ray start --head --block`, then a second node with
`--address`) in its own temp dir and ports, and stopped by the process ids these
tests started: other Ray instances on the machine (other tests') are left alone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest
from conftest import run_files
from test_estimate_cli import SMALL

from undercap.artifacts import load_efficiency
from undercap.cli import main

REPO = Path(__file__).resolve().parents[1]
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (undercap[ray])")
TASK_TITLE = "ray::undercap-estimate-run"  # the task's name (ray_executor.RayRuns)
# Six runs of a few seconds each on the bundled digits (as test_estimate_cli's resume test)
ARGS = [
    "estimate",
    *SMALL,
    "--batch-sizes",
    "8,16,32",
    "--seeds",
    "2",
    "--target-accuracy",
    "0.85",
    "--max-samples",
    "3000",
]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "src"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _same_runs(a: Path, b: Path) -> None:
    ea, eb = load_efficiency(a), load_efficiency(b)
    assert ea.samples_to_target == eb.samples_to_target
    assert ea.relative == eb.relative
    assert ea.extra["curves"] == eb.extra["curves"]


def test_light_install_never_imports_ray() -> None:
    code = (
        "import sys, undercap.estimate, undercap.cli, undercap.recipes.common;"
        "undercap.cli.build_parser(); sys.exit('ray' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, check=False)
    assert proc.returncode == 0, "importing undercap's estimate or CLI imported Ray"


@needs_ray
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--executor", "ray", "--ray-address", "127.0.0.1:{port}"], "no Ray head answers"),
        (["--executor", "ray", "--ray-address", "nowhere"], "give HOST:PORT"),
        (["--ray-address", "127.0.0.1:{port}"], "needs --executor ray"),
    ],
)
def test_bad_address_is_one_error_line(
    extra: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(_free_port())  # nothing listens there
    args = [*ARGS, "-o", str(tmp_path / "e.json"), *[x.format(port=port) for x in extra]]
    t0 = time.monotonic()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert time.monotonic() - t0 < 30  # not ray.init's minute of retries
    assert not (tmp_path / "e.json").exists()


@needs_ray
def test_more_threads_than_the_cluster_has_cpus_is_refused_and_ray_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from undercap.estimate.runs import cpu_cores

    threads = str(cpu_cores() + 1)  # a local Ray has this machine's cores
    args = [*ARGS, "--executor", "ray", "--threads", threads, "-o", str(tmp_path / "e.json")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--threads {threads}: each run asks Ray" in err[0], err
    assert not ray.is_initialized()  # not a task waiting forever, nor a Ray left running


@pytest.fixture(scope="module")
def pool_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local pool's estimate (--jobs 2), the reference for every Ray run."""
    out = tmp_path_factory.mktemp("pool") / "pool.json"
    assert main([*ARGS, "--jobs", "2", "-o", str(out)]) == 0
    return out


@needs_ray
@pytest.mark.slow
def test_local_ray_gives_the_pools_n_b(
    pool_result: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ray.json"
    assert main([*ARGS, "--executor", "ray", "-o", str(out)]) == 0
    _same_runs(out, pool_result)
    cfg = load_efficiency(out).extra["config"]
    assert cfg["executor"] == "ray" and cfg["ray_address"] is None and cfg["ray_nodes"] == 1
    assert len(run_files(tmp_path / "ray.json.runs")) == 6  # the driver wrote every run
    import ray

    assert not ray.is_initialized()  # the local Ray it started was shut down


# --- a two-node cluster on loopback ------------------------------------------------------
class Cluster:
    """A Ray head and a second node, each a `ray start --block` this test started."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ucray")  # short: Ray's socket paths have a limit
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[subprocess.Popen[bytes]] = []
        ray_bin = str(Path(sys.executable).parent / "ray")
        common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1"]
        common += ["--object-store-memory", str(100 * 1024**2), "--disable-usage-stats"]
        self._start([ray_bin, "start", "--head", "--port", str(self.port), *common,
                     "--include-dashboard=false", "--dashboard-port", str(_free_port()),
                     "--ray-client-server-port", str(_free_port()), "--temp-dir", self.dir,
                     "--dashboard-agent-listen-port", str(_free_port())])  # fmt: skip
        self._wait(lambda: self._alive_nodes() >= 1, "the head")
        self._start([ray_bin, "start", "--address", self.address, *common,
                     "--dashboard-agent-listen-port", str(_free_port())])  # fmt: skip
        self._wait(lambda: self._alive_nodes() >= 2, "the second node")

    def _start(self, cmd: list[str]) -> None:
        log = open(Path(self.dir) / f"node{len(self.nodes)}.log", "wb")  # noqa: SIM115
        env = dict(ENV, RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0")
        self.nodes.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))

    def _alive_nodes(self) -> int:
        code = (
            f"import ray; ray.init(address={self.address!r}, log_to_driver=False);"
            "print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=False
        )
        return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0

    def _wait(self, ok: Any, what: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while not ok():
            assert all(p.poll() is None for p in self.nodes), self.logs()
            assert time.monotonic() < deadline, f"{what} did not start: {self.logs()}"
            time.sleep(1)

    def logs(self) -> str:
        return "".join(p.read_text()[-2000:] for p in sorted(Path(self.dir).glob("node*.log")))

    def processes(self) -> list[Any]:
        """Every process our `ray start`s started (GCS, raylets, workers), by parentage."""
        import psutil

        out = []
        for node in self.nodes:
            with contextlib.suppress(psutil.NoSuchProcess):
                out += psutil.Process(node.pid).children(recursive=True)
        return out

    def stop(self) -> None:
        """SIGTERM our `ray start --block`s (they stop what they started), then SIGKILL
        any of their descendants still there: ids only, never `ray stop`."""
        import psutil

        procs = self.processes()
        for node in reversed(self.nodes):
            node.send_signal(signal.SIGTERM)
        for node in self.nodes:
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.kill()
        _, alive = psutil.wait_procs(procs, timeout=30)
        for p in alive:
            p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not HAS_RAY or shutil.which("ray", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("Ray (and its `ray` command beside this Python) is not installed")
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()


def _driver(args: list[str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "undercap.cli", *args]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _kill_one_running_task(cluster: Cluster, driver: Optional[subprocess.Popen[bytes]]) -> int:
    """SIGKILL the first worker seen running an estimate run; its pid."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert driver is None or driver.poll() is None, driver.communicate()[1].decode()
        for p in cluster.processes():
            try:
                if " ".join(p.cmdline()).strip() == TASK_TITLE:
                    p.kill()
                    return p.pid
            except Exception:  # gone meanwhile
                continue
        time.sleep(0.05)
    raise AssertionError("no worker was seen running an estimate run")


@pytest.mark.slow
def test_cluster_run_survives_a_killed_worker(
    cluster: Cluster, pool_result: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ray.json"
    driver = _driver([*ARGS, "--executor", "ray", "--ray-address", cluster.address, "-o", str(out)])
    try:
        _kill_one_running_task(cluster, driver)
        _, err = driver.communicate(timeout=400)
    finally:
        driver.kill()
    assert driver.returncode == 0, err.decode()
    _same_runs(out, pool_result)  # the killed run was retried: nothing lost, nothing changed
    cfg = load_efficiency(out).extra["config"]
    assert cfg["ray_nodes"] == 2 and cfg["ray_address"] == cluster.address
    assert len(run_files(tmp_path / "ray.json.runs")) == 6


@pytest.mark.slow
def test_cluster_run_out_of_retries_names_the_run_and_keeps_the_rest(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    import threading

    from undercap import defaults

    monkeypatch.setattr(defaults, "RAY_RUN_RETRIES", 0)  # the first dead worker is final
    killed: list[int] = []
    killer = threading.Thread(target=lambda: killed.append(_kill_one_running_task(cluster, None)))
    killer.start()
    out = tmp_path / "ray.json"
    rc = main([*ARGS, "--executor", "ray", "--ray-address", cluster.address, "-o", str(out)])
    killer.join()
    assert killed and rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: estimate run b="), err
    assert "after 0 retries" in err[0] and "run the estimate again to resume" in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_cluster_run_killed_driver_resumes_from_the_cache(
    cluster: Cluster, pool_result: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ray.json"
    args = [*ARGS, "--executor", "ray", "--ray-address", cluster.address, "-o", str(out)]
    driver, runs = _driver(args), tmp_path / "ray.json.runs"
    deadline = time.monotonic() + 300
    try:
        while not run_files(runs):
            assert driver.poll() is None, driver.communicate()[1].decode()
            assert time.monotonic() < deadline, "no run finished within 300 s"
            time.sleep(0.05)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    done = {n: json.loads(p.read_text()) for n, p in run_files(runs).items()}
    assert 1 <= len(done) < 6, f"kill came too late: {len(done)} runs already finished"
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"reused {len(done)} finished run(s)" in err and f"ran {6 - len(done)}" in err
    _same_runs(out, pool_result)
    after = {n: json.loads(p.read_text()) for n, p in run_files(runs).items()}
    assert all(after[n] == rec for n, rec in done.items())  # finished runs kept as they were


# --- what travels to a worker, without Ray -------------------------------------------
def _job(tmp_path: Path, pretrained: str | None, sha: str | None) -> Any:
    from undercap.data.spec import DataSpec
    from undercap.estimate.runs import Job

    return Job(model="small-cnn", data=DataSpec("digits"), batch_size=8, seed=0, lr=1e-3,
               optimizer="adam", weight_decay=0.0, target=0.9, max_samples=100,
               eval_every_samples=10, eval_max_samples=None, plateau_patience=None,
               pretrained=pretrained, init_seed=0, cache_root=str(tmp_path / "cache"),
               key={"pretrained_sha256": sha, "batch_size": 8, "seed": 0},
               torch_device="cpu", progress=True)  # fmt: skip


def test_weights_reach_a_node_without_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib
    import types

    from undercap.estimate import ray_executor as rx

    blob = b"weights" * 100
    sha = hashlib.sha256(blob).hexdigest()
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(get=lambda ref: ref))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "node-tmp"))
    here = tmp_path / "w.pt"
    here.write_bytes(blob)
    assert rx._with_local_weights(_job(tmp_path, str(here), sha), [blob]).pretrained == str(here)
    for path in (tmp_path / "absent.pt", tmp_path / "other.pt"):  # missing, or other bytes
        if path.name == "other.pt":
            path.write_bytes(b"not these weights")
        moved = rx._with_local_weights(_job(tmp_path, str(path), sha), [blob])
        assert moved.pretrained != str(path)
        assert hashlib.sha256(Path(moved.pretrained).read_bytes()).hexdigest() == sha
    assert rx._with_local_weights(_job(tmp_path, None, None), []).pretrained is None


def test_workers_get_no_cache_path_and_the_driver_writes_the_record(tmp_path: Path) -> None:
    from undercap.estimate import ray_executor as rx

    sent: list[Any] = []
    runs = object.__new__(rx.RayRuns)  # no Ray: only what _submit uses
    runs.device, runs.cpus_per_run, runs._weights = "cpu", 1, {}
    runs._task = type("T", (), {"remote": staticmethod(lambda *a: sent.append(a) or "ref")})()
    job = _job(tmp_path, None, None)
    assert runs._submit(job) == "ref"
    remote_job = sent[0][0]
    assert remote_job.cache_root is None and remote_job.progress is False  # no driver disk
    record = {"batch_size": 8, "seed": 0, "curve": []}
    assert rx.store_record(job, record) is record
    assert list(run_files(tmp_path / "cache")) == ["b8-seed0.json"]
