"""Estimate r(b) = N(b) / N(b_max) on a proxy dataset (paper Sec. 4.2).

N(b), the training samples needed to reach a target accuracy with batch size b, is
device-independent: it is measured on a server by fine-tuning the same pre-trained
model with every b, square-root learning-rate scaling from the largest batch
(Krizhevsky 2014; Hoffer et al. 2017), until the target or a sample budget. Only the
ratio r(b) is used by selection, so the proxy need not match the target data exactly.

Several seeds (data order; a fresh classifier head) give a mean and a spread.
N(b) is the mean over the seeds that reached the target; r(b) is relative to the
largest batch size that reached it; a batch size where no seed reached the target
has no r(b) and is listed under "excluded". The target is absolute
(`target_accuracy`) or a fraction of the best accuracy the largest batch reaches
within the budget (`target_fraction`: those reference runs go first, over the whole
budget or to a plateau, and their curves give N(b_max)).

Each finished (b, seed) run is kept in a work directory (efficiency_runs.WorkDir), so
re-running an interrupted estimate reuses every finished run.
"""

from __future__ import annotations

import hashlib
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from undercap.artifacts import Efficiency
from undercap.efficiency_aggregate import aggregate
from undercap.efficiency_runs import (
    Job,
    WorkDir,
    covers,
    cpu_cores,
    curve_within,
    first_crossing,
    init_worker,
    run_job,
)
from undercap.errors import UndercapError
from undercap.loop import scaled_lr
from undercap.pretrain import DataSpec, file_sha256, optimizer_settings, resolve_torch_device
from undercap.provenance import provenance

Record = dict[str, Any]


@dataclass(frozen=True)
class EstimateConfig:
    model: str
    data: DataSpec
    batch_sizes: tuple[int, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    target_accuracy: float | None = None  # absolute target, or ...
    target_fraction: float | None = None  # ... a fraction of b_max's best accuracy
    max_samples: int = 20_000  # budget per run
    eval_every_samples: int = 128
    eval_max_samples: int | None = None  # evaluate on at most this many test samples
    lr: float | None = None  # base LR at the largest batch; None: models.default_lr
    weight_decay: float | None = None  # None: 0 for Adam, 0.01 for AdamW
    pretrained: str | None = None  # weights file from `undercap pretrain`
    init_seed: int = 0  # the random init used by every run when there are no weights
    fresh_head: bool = False  # re-initialise the classifier head after loading the weights
    plateau_patience: int | None = None  # reference runs stop after this many evals w/o gain

    @property
    def b_max(self) -> int:
        return max(self.batch_sizes)

    def validate(self) -> None:
        if (self.target_accuracy is None) == (self.target_fraction is None):
            raise UndercapError("give exactly one of --target-accuracy or --target-fraction")
        t = self.target_accuracy if self.target_accuracy is not None else self.target_fraction
        if t is None or not 0.0 < t <= 1.0:
            raise UndercapError(f"target {t} must be a fraction in (0, 1], e.g. 0.9")
        if not self.batch_sizes or len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise UndercapError(f"batch sizes {list(self.batch_sizes)} must be distinct, >= 1")
        if min(self.batch_sizes) < 1:
            raise UndercapError("batch sizes must be positive integers")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UndercapError(f"seeds {list(self.seeds)} must be a non-empty distinct list")
        if self.max_samples < self.b_max:
            raise UndercapError(
                f"--max-samples {self.max_samples} is below the largest batch size {self.b_max}"
            )
        if self.fresh_head and self.pretrained is None:
            raise UndercapError("--fresh-head needs --pretrained weights")
        if self.eval_every_samples < 1:
            raise UndercapError("--eval-every must be a positive number of samples")


def fingerprint(cfg: EstimateConfig, base_lr: float, opt: str, wd: float) -> dict[str, Any]:
    """What determines every run's trajectory. Targets, budgets, the batch-size list
    and seeds are not in it: runs are reused per request (efficiency_runs.covers),
    so an estimate may grow by seeds or batch sizes; b_max is, as it sets every LR."""
    return {
        "model": cfg.model,
        "dataset": cfg.data.dataset,
        "input_shape": list(cfg.data.input_shape) if cfg.data.input_shape else None,
        "context": cfg.data.context,
        "limit": cfg.data.limit,
        "data_seed": cfg.data.seed,
        "split": cfg.data.split,
        "test_order": "seeded-shuffle",  # pretrain.load_splits; older work dirs used file order
        "b_max": cfg.b_max,
        "base_lr": base_lr,
        "optimizer": opt,
        "weight_decay": wd,
        "eval_every_samples": cfg.eval_every_samples,
        "eval_max_samples": cfg.eval_max_samples,
        "pretrained_sha256": file_sha256(cfg.pretrained) if cfg.pretrained else None,
        "init_seed": None if cfg.pretrained else cfg.init_seed,
        "fresh_head": cfg.fresh_head,
    }


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclass
class _Runner:
    """Runs the (b, seed) requests not covered by finished runs, in-process or in a
    pool of spawned workers, and tracks what it reused and ran."""

    cfg: EstimateConfig
    workdir: WorkDir
    base_lr: float
    opt: str
    wd: float
    device: str
    jobs: int
    threads: int | None
    progress: bool
    bar: Any
    reused: int = 0
    ran: int = 0
    _pool: Any = None  # one worker pool for every phase (spawning costs seconds)

    def ensure(
        self, pairs: Iterable[tuple[int, int]], target: float | None
    ) -> dict[tuple[int, int], Record]:
        finished = self.workdir.load_runs()
        patience = self.cfg.plateau_patience if target is None else None
        out: dict[tuple[int, int], Record] = {}
        todo: list[Job] = []
        for b, s in pairs:
            rec = finished.get((b, s))
            if rec is not None and covers(rec, target, self.cfg.max_samples, patience):
                out[(b, s)] = rec
                self.reused += 1
            else:
                todo.append(self._job(b, s, target, patience))
        if self.bar is not None:
            self.bar.update(len(out))
        for rec in self._execute(todo):
            out[(rec["batch_size"], rec["seed"])] = rec
            self.ran += 1
            if self.bar is not None:
                self.bar.set_postfix_str(_run_summary(rec, target), refresh=False)
                self.bar.update(1)
        return out

    def _job(self, b: int, seed: int, target: float | None, patience: int | None) -> Job:
        return Job(
            model=self.cfg.model,
            data=self.cfg.data,
            batch_size=b,
            seed=seed,
            lr=scaled_lr(self.base_lr, b, self.cfg.b_max),
            optimizer=self.opt,
            weight_decay=self.wd,
            target=target,
            max_samples=self.cfg.max_samples,
            eval_every_samples=self.cfg.eval_every_samples,
            eval_max_samples=self.cfg.eval_max_samples,
            plateau_patience=patience,
            pretrained=self.cfg.pretrained,
            fresh_head=self.cfg.fresh_head,
            init_seed=self._init_seed(seed),
            path=str(self.workdir.run_path(b, seed)),
            torch_device=self.device,
            progress=self.progress and self.jobs == 1,
        )

    def _init_seed(self, seed: int) -> int:
        """Without weights: the one fixed random init for every run. With weights, the
        seed of the (fresh) head, per seed and derived from the weights file, so it can
        never repeat the initial head the weights were pre-trained from (that head
        fits the trained body unduly well: a run starting from it looks pre-trained)."""
        sha = self.workdir.fingerprint.get("pretrained_sha256")
        if sha is None:
            return self.cfg.init_seed
        return int(hashlib.sha256(f"{sha}:{seed}".encode()).hexdigest()[:8], 16)

    def _execute(self, todo: list[Job]) -> Iterable[Record]:
        if not todo:
            return
        if self.jobs == 1:
            for job in todo:
                yield run_job(job)
            return
        from concurrent.futures import as_completed

        futures = [self._executor().submit(run_job, job) for job in todo]
        try:
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            for fut in futures:
                fut.cancel()

    def _executor(self) -> Any:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            threads = self.threads or max(1, cpu_cores() // self.jobs)
            ctx = multiprocessing.get_context("spawn")  # fork is unsafe with torch threads/CUDA
            self._pool = ProcessPoolExecutor(
                self.jobs,
                ctx,
                initializer=init_worker,
                initargs=(threads, self.cfg.data, self.device),
            )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def estimate(
    cfg: EstimateConfig,
    *,
    work_dir: str | Path,
    jobs: int = 1,
    torch_device: str = "auto",
    fresh: bool = False,
    progress: bool = True,
    threads: int | None = None,
    log: Callable[[str], None] = _stderr,
) -> Efficiency:
    """Run (or resume) the estimate and return the efficiency artifact (not saved).

    `jobs` worker processes run (b, seed) jobs in parallel, each with `threads` torch
    threads (default: the cores split between the workers). `threads` also applies
    to jobs=1 runs in this process (default: torch's own setting)."""
    from undercap.models import default_lr

    cfg.validate()
    if jobs < 1:
        raise UndercapError("--jobs must be at least 1")
    device = resolve_torch_device(torch_device)
    if threads is not None and jobs == 1:
        import torch

        torch.set_num_threads(threads)
    base_lr = cfg.lr if cfg.lr is not None else default_lr(cfg.model)
    opt, wd = optimizer_settings(cfg.model, cfg.weight_decay)
    fp = fingerprint(cfg, base_lr, opt, wd)
    workdir = WorkDir(work_dir, fp, fresh=fresh)
    t0 = time.perf_counter()
    bar = _runs_bar(len(cfg.batch_sizes) * len(cfg.seeds), progress)
    runner = _Runner(cfg, workdir, base_lr, opt, wd, device, jobs, threads, progress, bar)
    others = sorted(b for b in cfg.batch_sizes if b != cfg.b_max)
    try:
        records, target_info = _run_all(cfg, runner, others)
    finally:
        runner.close()
        if bar is not None:
            bar.close()
    if runner.reused:
        log(f"reused {runner.reused} finished run(s) from {workdir.runs_dir}; ran {runner.ran}")
    eff = aggregate(cfg, records, target_info)
    cost = dict(eff.extra["cost"], elapsed_s=time.perf_counter() - t0, reused_runs=runner.reused)
    extra = dict(eff.extra, cost=cost)
    extra["config"] = dict(
        fp,
        batch_sizes=sorted(cfg.batch_sizes),
        seeds=list(cfg.seeds),
        max_samples=cfg.max_samples,
        plateau_patience=cfg.plateau_patience,
        pretrained=cfg.pretrained,
        data_dir=cfg.data.data_dir,
        work_dir=str(workdir.root),
        jobs=jobs,
        torch_device=device,
    )
    extra["provenance"] = provenance(
        seeds=list(cfg.seeds), torch_device=device, jobs=jobs, torch_threads=threads
    )
    return Efficiency(
        eff.model, eff.dataset, eff.target_accuracy, eff.samples_to_target, eff.relative, extra
    )


def _run_summary(rec: Record, target: float | None) -> str:
    head = f"b={rec['batch_size']} seed={rec['seed']}"
    if target is None:  # a reference run: its best accuracy sets the target
        return f"{head} best={max(p[1] for p in rec['curve']):.3f}"
    return f"{head} N={first_crossing([(p[0], p[1]) for p in rec['curve']], target)}"


def _runs_bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="estimate", unit="run", file=sys.stderr)


def _run_all(
    cfg: EstimateConfig, runner: _Runner, others: list[int]
) -> tuple[dict[tuple[int, int], Record], dict[str, Any]]:
    """Largest batch first (it is the reference); with a relative target its runs go
    over the whole budget and fix the absolute target for the rest."""
    b_max, seeds = cfg.b_max, cfg.seeds
    if cfg.target_fraction is None:
        target = float(cfg.target_accuracy)  # type: ignore[arg-type]
        pairs = [(b_max, s) for s in seeds] + [(b, s) for b in others for s in seeds]
        return runner.ensure(pairs, target), {"mode": "absolute", "accuracy": target}
    refs = runner.ensure([(b_max, s) for s in seeds], None)
    best = [max(a for _, a in curve_within(refs[(b_max, s)], cfg.max_samples)) for s in seeds]
    reference = statistics.fmean(best)
    target = cfg.target_fraction * reference
    records = dict(refs)
    records.update(runner.ensure([(b, s) for b in others for s in seeds], target))
    info = {
        "mode": "fraction",
        "fraction": cfg.target_fraction,
        "reference_batch_size": b_max,
        "reference_accuracy": reference,
        "reference_best_per_seed": best,
        "accuracy": target,
    }
    return records, info
