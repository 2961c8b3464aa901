"""Estimate runs as Ray tasks, on a local Ray or a cluster (`--executor ray`).

Each (proxy, b, seed) run is one Ray task asking for `cpus_per_run` CPUs (its torch
threads, pinned in the task) and, for CUDA runs, one GPU. Without an address a local Ray
is started and shut down at the end; with one, the driver joins that cluster and leaves
it running. What the local pool guarantees holds here too (docs/guides/cluster.md): a
task runs the very `runs.run_job` on the same Job (same N(b)), and the driver caches
each record as it comes back, so workers need none of its disk and an interrupted
estimate resumes.

Ray is imported here only: `import undercap.estimate` and the light device install
never import it (tests/test_ray_estimate.py checks).
"""

import logging
import os
import socket
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from undercap import __version__, defaults
from undercap.artifacts.io import atomic_path, file_sha256
from undercap.errors import UndercapError, require
from undercap.estimate.aggregate import Record
from undercap.estimate.runs import Job, cpu_cores, run_job, store_record

LOCAL = None  # no address: a local Ray of this process


def _run_task(job: Job, threads: int, weights: List[Any], version: str) -> Record:
    import torch

    if version != __version__:  # a node with other code would give other runs
        raise UndercapError(
            f"node {socket.gethostname()} has undercap {__version__}, the driver "
            f"{version}: install the same version on every node"
        )
    torch.set_num_threads(threads)  # Ray sets OMP_NUM_THREADS only; torch has its own pool
    try:
        return run_job(_with_local_weights(job, weights))
    except UndercapError as e:  # a user's error: say where it happened
        raise UndercapError(f"{e} (on node {socket.gethostname()})") from e


def _with_local_weights(job: Job, weights: List[Any]) -> Job:
    """`job` with its pre-trained weights at a path on this node: its own path when the
    file there is the one the run is keyed by, else a copy from the object store."""
    if job.pretrained is None:
        return job
    sha = job.key.get("pretrained_sha256")
    if os.path.isfile(job.pretrained) and file_sha256(job.pretrained) == sha:
        return job
    import ray

    local = Path(tempfile.gettempdir()) / "undercap-ray-weights" / f"{sha}.pt"
    if not local.is_file():
        with atomic_path(local) as tmp:
            tmp.write_bytes(ray.get(weights[0]))
    return replace(job, pretrained=str(local))


class RayRuns:
    """A connection to Ray that runs estimate Jobs; `close()` ends what it started."""

    def __init__(
        self, address: Optional[str], torch_device: str, cpus_per_run: int, retries: int
    ) -> None:
        self.ray = require("ray", "ray", "--executor ray")
        self.address = address
        self.started = _connect(self.ray, address)
        self.cpus_per_run = cpus_per_run
        self.retries = retries
        self._weights: Dict[str, Any] = {}  # weights file -> its object-store ref
        try:
            self.device = self._device(torch_device)
            cpus = self.ray.cluster_resources().get("CPU", 0.0)
            if cpus < cpus_per_run:  # Ray would wait forever for an infeasible task
                raise UndercapError(
                    f"--threads {cpus_per_run}: each run asks Ray for that many CPUs, "
                    f"but the cluster has {cpus:g}; give fewer threads"
                )
        except BaseException:
            self.close()  # a Ray we started must not outlive a refusal
            raise
        self.gpus_per_run = 1.0 if self.device.startswith("cuda") else 0.0
        self._task = self.ray.remote(_run_task).options(
            num_cpus=cpus_per_run,
            num_gpus=self.gpus_per_run,
            max_retries=retries,
            retry_exceptions=False,
            name="undercap-estimate-run",
        )

    def describe(self) -> Dict[str, Any]:
        """Where the runs went, for the artifact's provenance."""
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        return {
            "executor": "ray",
            "ray_address": self.address,
            "ray_version": self.ray.__version__,
            "ray_nodes": len(nodes),
            "ray_cpus_per_run": self.cpus_per_run,
            "ray_gpus_per_run": self.gpus_per_run,
        }

    def _device(self, torch_device: str) -> str:
        """'auto' means the cluster's GPUs if it has any (the driver may have none);
        'cuda:N' becomes 'cuda': Ray hands each task its GPU as device 0."""
        has_gpu = self.ray.cluster_resources().get("GPU", 0.0) > 0
        if torch_device == "auto":
            return "cuda" if has_gpu else "cpu"
        if torch_device.startswith("cuda"):
            if not has_gpu:
                raise UndercapError(
                    f"--torch-device {torch_device}: the Ray cluster has no GPU; "
                    "use --torch-device cpu or add GPU nodes"
                )
            return "cuda"
        if torch_device != "cpu":
            raise UndercapError(f"--torch-device {torch_device!r}: use auto, cpu or cuda[:N]")
        return torch_device

    def _capacity(self) -> int:
        """Runs the cluster can hold at once (recomputed: nodes may come and go)."""
        res = self.ray.cluster_resources()
        room = int(res.get("CPU", 0.0) // self.cpus_per_run)
        if self.gpus_per_run:
            room = min(room, int(res.get("GPU", 0.0) // self.gpus_per_run))
        return max(1, room)

    def run(self, todo: List[Job], skip: Callable[[Job], bool]) -> Iterator[Record]:
        """Run the jobs as tasks, yielding each record once it is in the cache; `skip`
        is asked for each job just before it is submitted (as the cluster has room, so a
        hopeless batch size stops new runs)."""
        pending, inflight = list(todo), {}
        try:
            while pending or inflight:
                while pending and len(inflight) < self._capacity():
                    job = pending.pop(0)
                    if not skip(job):
                        inflight[self._submit(job)] = job
                if not inflight:
                    return
                done, _ = self.ray.wait(list(inflight), num_returns=1, timeout=1.0)
                for ref in done:
                    job = inflight.pop(ref)
                    yield store_record(job, self._result(ref, job))  # the driver keeps it
        finally:
            for ref in inflight:  # interrupted or failed: no orphan runs on the cluster
                self.ray.cancel(ref, force=True)

    def _submit(self, job: Job) -> Any:
        weights = []
        if job.pretrained is not None:
            if job.pretrained not in self._weights:
                self._weights[job.pretrained] = self.ray.put(Path(job.pretrained).read_bytes())
            weights = [self._weights[job.pretrained]]  # nested: fetched only when needed
        remote = replace(job, cache_root=None, progress=False, torch_device=self.device)
        return self._task.remote(remote, self.cpus_per_run, weights, __version__)

    def _result(self, ref: Any, job: Job) -> Record:
        what = f"estimate run b={job.batch_size} seed={job.seed}"
        exc = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except exc.RayTaskError as e:
            if isinstance(e.cause, UndercapError):
                raise UndercapError(f"{what}: {e.cause}") from e
            raise  # a bug in the run: its traceback, not one line
        except exc.RayError as e:
            raise UndercapError(
                f"{what} failed on the Ray cluster after {self.retries} retries "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                "the runs finished before it are kept: run the estimate again to resume"
            ) from e

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False


@contextmanager
def session(address: Optional[str]) -> Iterator[None]:
    """One Ray connection for several estimates (a command's proxies, `compare`'s proxy
    and target): each estimate inside it uses it instead of starting its own."""
    ray = require("ray", "ray", "--executor ray")
    started = _connect(ray, address)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _connect(ray: Any, address: Optional[str]) -> bool:
    """Join the cluster at `address`, or start a local Ray (address None), unless this
    process is connected already (a session, or the caller's own ray.init): then use
    that connection. True when we started or joined (and must leave)."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # Ray 2.4x's warning
    if ray.is_initialized():
        return False
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address is LOCAL:
            # "local", not None: None would join any cluster `ray start` left on this
            # machine (ray.init's docs, its address resolution)
            ray.init(
                address="local",
                num_cpus=cpu_cores(),
                include_dashboard=False,
                object_store_memory=defaults.RAY_OBJECT_STORE_BYTES,
                **quiet,
            )
        else:
            _check_reachable(address)
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = "start a local Ray" if address is LOCAL else f"join the Ray cluster at {address}"
        raise UndercapError(f"could not {where}: {str(e).splitlines()[0]}") from e
    return True


def _check_reachable(address: str) -> None:
    """A quick TCP check of HOST:PORT, so a wrong address is one line at once
    (ray.init retries an unreachable address for about a minute)."""
    if address == "auto":
        return  # the cluster `ray start` left on this machine: Ray's own lookup
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise UndercapError(
            f"--ray-address {address!r}: give HOST:PORT of the head node (e.g. "
            "10.0.0.1:6379), ray://HOST:PORT, or auto"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=defaults.RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise UndercapError(
            f"--ray-address {address}: no Ray head answers there ({e.strerror or e}); start "
            "one with `ray start --head`, or leave out --ray-address for a local Ray"
        ) from e
