"""Estimate r(b) = N(b) / N(b_max) on a proxy dataset (paper Sec. 4.2).

N(b), the training samples needed to reach a target accuracy with batch size b, is
device-independent: it is measured on a server by fine-tuning the same pre-trained
model with every b, square-root learning-rate scaling from the largest batch
(Krizhevsky 2014; Hoffer et al. 2017), until the target or a sample budget. Only the
ratio r(b) is used by selection, so the proxy need not match the target data exactly.
Several seeds (data order; a fresh classifier head) give a mean and a spread. With
`target_fraction`, b_max's reference runs go first and set the target. Each finished
(b, seed) run is cached (runs.py), so an interrupted or extended estimate reuses it.

Layout: config.py (what is asked), runs.py (one run), evalsched.py (sparse evaluation),
aggregate.py (runs -> artifact), pretrain.py (the weights every run starts from),
ray_executor.py (runs as Ray tasks: executor="ray", imported only then).
"""

import hashlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from undercap import defaults
from undercap._compat import nullcontext
from undercap.artifacts.cache import Cache
from undercap.artifacts.efficiency import Efficiency
from undercap.artifacts.io import PathLike
from undercap.artifacts.provenance import provenance
from undercap.data.spec import describe_slice
from undercap.errors import UndercapError
from undercap.estimate.aggregate import Record, aggregate, of_slice, reference_target
from undercap.estimate.config import EstimateConfig, fingerprint, run_key
from undercap.estimate.runs import (
    RUN_KIND,
    Job,
    covers,
    cpu_cores,
    curve_within,
    first_crossing,
    init_worker,
    run_job,
)
from undercap.report.progress import bar as progress_bar
from undercap.train.loop import resolve_torch_device, scaled_lr
from undercap.train.loop.precision import host_precision

__all__ = ["EstimateConfig", "estimate", "executor_session"]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclass
class _Runner:
    """Runs the (b, seed) requests not covered by finished runs, in-process or in a
    pool of spawned workers, and tracks what it reused and ran."""

    cfg: EstimateConfig
    cache: Cache
    fingerprint: Dict[str, Any]
    fresh: bool
    device: str
    jobs: int
    threads: Optional[int]
    progress: bool
    bar: Any
    remote: Any = None  # estimate.ray_executor.RayRuns under --executor ray
    reused: int = 0
    ran: int = 0
    skipped: List[Tuple[int, int]] = field(default_factory=list)  # (b, seed) left out
    _pool: Any = None  # one worker pool for every phase (spawning costs seconds)

    def ensure(
        self, pairs: Iterable[Tuple[int, int]], target: Optional[float]
    ) -> Dict[Tuple[int, int], Record]:
        patience = self.cfg.plateau_patience if target is None else None
        out: Dict[Tuple[int, int], Record] = {}
        todo: List[Job] = []
        for b, s in pairs:
            entry = self.cache.entry(RUN_KIND, run_key(self.fingerprint, b, s))
            rec = None if self.fresh or entry is None else entry.load_json()
            if rec is not None and covers(rec, target, self.cfg.max_samples, patience):
                out[(b, s)] = rec
                self.reused += 1
            else:
                todo.append(self._job(b, s, target, patience))
        self.bar.update(len(out))
        hopeless = {b for (b, _), rec in out.items() if _hopeless(rec, target, self.cfg)}
        for rec in self._execute(todo, lambda job: job.batch_size in hopeless):
            out[(rec["batch_size"], rec["seed"])] = rec
            self.ran += 1
            if _hopeless(rec, target, self.cfg):
                hopeless.add(rec["batch_size"])
            self.bar.set_postfix_str(_run_summary(rec, target), refresh=False)
            self.bar.update(1)
        self.skipped = sorted(set(self.skipped) | {(j.batch_size, j.seed) for j in todo} - set(out))
        self.bar.update(len(todo) - sum(1 for j in todo if (j.batch_size, j.seed) in out))
        return out

    def _job(self, b: int, seed: int, target: Optional[float], patience: Optional[int]) -> Job:
        return Job(
            model=self.cfg.model,
            data=self.cfg.data,
            batch_size=b,
            seed=seed,
            lr=scaled_lr(self.cfg.base_lr, b, self.cfg.b_max),
            optimizer=self.cfg.optimizer,
            weight_decay=self.cfg.weight_decay_used,
            target=target,
            max_samples=self.cfg.max_samples,
            eval_every_samples=self.cfg.eval_every_samples,
            eval_max_samples=self.cfg.eval_max_samples,
            plateau_patience=patience,
            pretrained=self.cfg.pretrained,
            fresh_head=self.cfg.fresh_head,
            loss=self.cfg.loss,
            metric=self.cfg.metric,
            recipe=self.cfg.recipe_for(b),
            init_seed=self._init_seed(seed),
            cache_root=None if self.cache.root is None else str(self.cache.root),
            key=run_key(self.fingerprint, b, seed),
            torch_device=self.device,
            # an estimate has no board: on a CPU fp16 runs as bf16, as for a simulated one
            precision=host_precision(self.cfg.precision, self.device, simulated=True),
            progress=self.progress and self.jobs == 1 and self.remote is None,
            sparse=None
            if self.cfg.eval_schedule == "dense"
            else self.cfg.sparse_params(self.device),
            screen_explicit=self.cfg.screen_samples is not None,
        )

    def _init_seed(self, seed: int) -> int:
        """Without weights: the one fixed random init for every run. With weights, the
        (fresh) head's seed, per seed and derived from the weights file, so it never
        repeats the head they were pre-trained from (which fits the body unduly well)."""
        sha = self.fingerprint.get("pretrained_sha256")
        if sha is None:
            return self.cfg.init_seed
        return int(hashlib.sha256(f"{sha}:{seed}".encode()).hexdigest()[:8], 16)

    def _execute(self, todo: List[Job], skip: Callable[[Job], bool]) -> Iterable[Record]:
        """Run the jobs, leaving out (or cancelling, in the pool) those `skip` rules out
        by then: it sees each finished record's effect before the next job starts."""
        if not todo:
            return
        if self.remote is not None:
            yield from self.remote.run(todo, skip)
            return
        if self.jobs == 1:
            for job in todo:
                if not skip(job):
                    yield run_job(job)
            return
        from concurrent.futures import as_completed

        futures = {self._executor().submit(run_job, job): job for job in todo}
        try:
            for fut in as_completed(futures):
                if fut.cancelled():
                    continue
                yield fut.result()
                for other, job in futures.items():
                    if skip(job):
                        other.cancel()  # no-op for a job already running or done
        finally:
            for fut in futures:
                fut.cancel()

    def _executor(self) -> Any:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            threads = self.threads or max(1, cpu_cores() // self.jobs)
            ctx = multiprocessing.get_context("spawn")  # fork is unsafe with torch threads/CUDA
            self._pool = ProcessPoolExecutor(  # novermin: estimates run on the server (3.8+)
                self.jobs,
                ctx,
                initializer=init_worker,
                initargs=(threads, self.cfg.data, self.device),
            )
        return self._pool

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
        # Pending futures were cancelled by _execute; shutdown(cancel_futures=) is
        # Python 3.9+, and JetPack 5 runs 3.8.
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def estimate(
    cfg: EstimateConfig,
    *,
    cache_dir: Optional[PathLike],
    jobs: int = 1,
    torch_device: str = "auto",
    fresh: bool = False,
    progress: bool = True,
    threads: Optional[int] = None,
    log: Callable[[str], None] = _stderr,
    executor: str = "local",
    ray_address: Optional[str] = None,
) -> Efficiency:
    """Run (or resume) the estimate and return the efficiency artifact (not saved).

    Finished runs are kept in the cache at `cache_dir` (None: keep nothing) and reused
    unless `fresh`. `jobs` worker processes run (b, seed) jobs in parallel, each with
    `threads` torch threads (default: the cores split between them; with jobs=1, in this
    process, torch's own setting). executor="ray" runs each (b, seed) as a Ray task
    instead (`pip install 'undercap[ray]'`) on the cluster at `ray_address` (None: a
    local Ray), with `threads` (default 1) CPUs and torch threads per run."""
    cfg.validate()
    if jobs < 1:
        raise UndercapError("--jobs must be at least 1")
    fp = fingerprint(cfg)  # before Ray starts: a bad weights path fails at once
    sliced = None if cfg.data.slice_fraction is None else describe_slice(cfg.data)  # as early
    remote = _remote(executor, ray_address, torch_device, threads)
    device = resolve_torch_device(torch_device) if remote is None else remote.device
    if threads is not None and jobs == 1 and remote is None:
        import torch

        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    bar = progress_bar(
        progress, desc="estimate", unit="run", total=len(cfg.batch_sizes) * len(cfg.seeds)
    )
    runner = _Runner(cfg, Cache(cache_dir), fp, fresh, device, jobs, threads, progress, bar, remote)
    try:
        records, target_info = _run_all(cfg, runner)
        where = {"executor": "local"} if remote is None else remote.describe()
    finally:
        runner.close()
        bar.close()
    if runner.reused:
        log(f"reused {runner.reused} finished run(s) from the cache {cache_dir}; ran {runner.ran}")
    work_dir = None if cache_dir is None else str(cache_dir)
    eff = aggregate(cfg, records, target_info, skipped=runner.skipped, work_dir=work_dir)
    eff.extra["cost"].update(elapsed_s=time.perf_counter() - t0, reused_runs=runner.reused)
    eff.extra["config"] = dict(_config_record(cfg, fp, work_dir, jobs, device), **where)
    eff.extra["provenance"] = provenance(
        seeds=list(cfg.seeds), torch_device=device, jobs=jobs, torch_threads=threads
    )
    return eff if sliced is None else of_slice(cfg, eff, sliced)


def _remote(
    executor: str, address: Optional[str], torch_device: str, threads: Optional[int]
) -> Any:
    """None for the local pool; a started estimate.ray_executor.RayRuns for Ray
    (imported only here: the light install never imports Ray)."""
    if executor not in ("local", "ray"):
        raise UndercapError(f"--executor {executor!r}: use local or ray")
    if executor == "local":
        if address is not None:
            raise UndercapError("--ray-address needs --executor ray")
        return None
    from undercap.estimate.ray_executor import RayRuns

    return RayRuns(address, torch_device, threads or 1, defaults.RAY_RUN_RETRIES)


def executor_session(executor: str, ray_address: Optional[str]) -> Any:
    """A context in which every estimate() with the same executor shares one Ray
    connection (started or joined once; a bad address fails here, before any work);
    nothing for the local pool."""
    if executor != "ray":
        return nullcontext()
    from undercap.estimate.ray_executor import session

    return session(ray_address)


def _config_record(
    cfg: EstimateConfig, fp: Dict[str, Any], work_dir: Optional[str], jobs: int, device: str
) -> Dict[str, Any]:
    """The artifact's `config`: the fingerprint plus how the estimate ran."""
    return dict(
        fp,
        batch_sizes=sorted(cfg.batch_sizes),
        seeds=list(cfg.seeds),
        max_samples=cfg.max_samples,
        plateau_patience=cfg.plateau_patience,
        pretrained=cfg.pretrained,
        data_dir=cfg.data.data_dir,
        cache_dir=work_dir,
        jobs=jobs,
        torch_device=device,
        eval_schedule=cfg.eval_schedule,  # which schedule made the curves (runs' "eval")
        precision=cfg.precision,
        host_precision=host_precision(cfg.precision, device, simulated=True),
    )


def _hopeless(rec: Record, target: Optional[float], cfg: EstimateConfig) -> bool:
    """A run that spent the whole budget and ended far below the target: its batch
    size's other seeds would spend the budget in vain too (defaults.ESTIMATE_HOPELESS_GAP)."""
    if target is None or rec["samples_trained"] < cfg.max_samples:
        return False
    curve = curve_within(rec, cfg.max_samples)
    return max([a for _, a in curve] + [0.0]) < target - defaults.ESTIMATE_HOPELESS_GAP


def _run_summary(rec: Record, target: Optional[float]) -> str:
    head = f"b={rec['batch_size']} seed={rec['seed']}"
    if target is None:  # a reference run: its best accuracy sets the target
        return f"{head} best={max(p[1] for p in rec['curve']):.3f}"
    return f"{head} N={first_crossing([(p[0], p[1]) for p in rec['curve']], target)}"


def _run_all(
    cfg: EstimateConfig, runner: _Runner
) -> Tuple[Dict[Tuple[int, int], Record], Dict[str, Any]]:
    """Largest batch first (it is the reference); with a relative target its runs go
    over the whole budget and fix the absolute target for the rest."""
    b_max, seeds = cfg.b_max, cfg.seeds
    others = sorted(b for b in cfg.batch_sizes if b != b_max)
    if cfg.target_fraction is None:
        target = float(cfg.target_accuracy)  # type: ignore[arg-type]
        pairs = [(b_max, s) for s in seeds] + [(b, s) for b in others for s in seeds]
        return runner.ensure(pairs, target), {"mode": "absolute", "accuracy": target}
    refs = runner.ensure([(b_max, s) for s in seeds], None)
    records = dict(refs)
    info = reference_target(cfg, refs)
    records.update(runner.ensure([(b, s) for b in others for s in seeds], info["accuracy"]))
    return records, info
