"""One (batch size, seed) run of the efficiency estimate, and the work directory
that keeps every finished run so an interrupted estimate resumes where it stopped.

A run fine-tunes a fresh copy of the model (pre-trained weights, or a seeded random
init) with the common training loop at batch size b and the square-root-scaled
learning rate, evaluating on the test split every `eval_every_samples`, and stops at
its target accuracy, at the sample budget or, for reference runs, at a plateau. Its
record (curve, samples, seconds) is written atomically as `runs/b<b>-seed<s>.json`
by whichever process ran it, so finished work survives a SIGKILL of the parent.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from undercap.artifacts import load_json, save_json
from undercap.errors import ArtifactError, UndercapError
from undercap.pretrain import DataSpec

RUN_SCHEMA = "undercap.efficiency-run/1"
WORKDIR_SCHEMA = "undercap.efficiency-workdir/1"


@dataclass(frozen=True)
class Job:
    """Everything a worker process needs for one run (picklable)."""

    model: str
    data: DataSpec
    batch_size: int
    seed: int
    lr: float
    optimizer: str
    weight_decay: float
    target: float | None  # stop at this accuracy; None: reference run over the whole budget
    max_samples: int
    eval_every_samples: int
    eval_max_samples: int | None
    plateau_patience: int | None  # reference runs only: stop after this many evals w/o a new best
    pretrained: str | None
    init_seed: int  # seeds the model's initialisation (all of it, or the fresh head)
    path: str
    torch_device: str
    progress: bool
    fresh_head: bool = False  # re-initialise the head after loading (transfer to a new task)


class _Plateau(Exception):
    """Raised from the eval hook to end a reference run whose accuracy stopped rising."""


_SPLITS_CACHE: dict[tuple[DataSpec, str], Any] = {}


def _splits(data: DataSpec, device: str) -> Any:
    from undercap.pretrain import load_splits

    key = (data, device)
    if key not in _SPLITS_CACHE:
        _SPLITS_CACHE.clear()  # one dataset per process at a time
        _SPLITS_CACHE[key] = load_splits(data, device)
    return _SPLITS_CACHE[key]


def init_worker(threads: int, data: DataSpec, device: str) -> None:
    """Pool initializer: share the cores between workers, die with the parent (Linux
    PR_SET_PDEATHSIG, prctl(2)) so a killed estimate leaves no orphans, and load the
    data once per worker before its first run."""
    import torch

    torch.set_num_threads(threads)
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    _splits(data, device)
    import undercap.models  # noqa: F401  (imported here so runs time only the training)


def run_job(job: Job) -> dict[str, Any]:
    """Train one (b, seed) run, write its record atomically, return the record."""
    from undercap.loop import LoopConfig, Trainer
    from undercap.pretrain import initial_model, progress_hooks, sample_bar

    t_load = time.perf_counter()
    splits = _splits(job.data, job.torch_device)  # cached per process
    t0 = time.perf_counter()
    # Every b at one seed starts from the same weights (init_seed: efficiency._Runner).
    model, init = initial_model(
        job.model,
        splits,
        init_seed=job.init_seed,
        pretrained=job.pretrained,
        fresh_head=job.fresh_head,
    )
    cfg = LoopConfig(
        batch_size=job.batch_size,
        lr=job.lr,
        optimizer=job.optimizer,
        weight_decay=job.weight_decay,
        target_accuracy=job.target,
        max_samples=job.max_samples,
        eval_every_samples=job.eval_every_samples,
        eval_max_samples=job.eval_max_samples,
        seed=job.seed,
    )
    bar = sample_bar(job.max_samples, f"b={job.batch_size} seed={job.seed}", job.progress)
    on_step, show_eval = progress_hooks(bar)
    best = {"acc": -1.0, "since": 0}

    def on_eval(trainer: Any, point: Any) -> None:
        if show_eval is not None:
            show_eval(trainer, point)
        if job.plateau_patience is None:
            return
        if point.accuracy > best["acc"]:
            best["acc"], best["since"] = point.accuracy, 0
        else:
            best["since"] += 1
            if best["since"] >= job.plateau_patience:
                raise _Plateau

    trainer = Trainer(model, splits, cfg, job.torch_device, on_step=on_step, on_eval=on_eval)
    stop = "budget"
    try:
        result = trainer.run()
        if result.reached:
            stop = "target"
    except _Plateau:
        result, stop = trainer.result(), "plateau"
    finally:
        if bar is not None:
            bar.close()
    record = {
        "schema": RUN_SCHEMA,
        "batch_size": job.batch_size,
        "seed": job.seed,
        "lr": job.lr,
        "target_accuracy": job.target,
        "max_samples": job.max_samples,
        "plateau_patience": job.plateau_patience,
        "stop": stop,
        "samples_to_target": result.samples_to_target,
        "samples_trained": result.samples_trained,
        "steps": result.steps,
        "curve": [[p.samples, p.accuracy, _finite_or_none(p.loss)] for p in result.curve],
        "accuracy_kind": "character" if splits.kind == "text" else "sample",
        "wall_s": time.perf_counter() - t0,  # model set-up + training + evaluation
        "data_load_s": t0 - t_load,
        "train_wall_s": result.train_wall_s,
        "eval_wall_s": result.eval_wall_s,
        "torch_device": job.torch_device,
        "init": init,
    }
    save_json(job.path, record)
    return record


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None  # a diverged run's NaN loss is not JSON


# --- reading a run's curve ------------------------------------------------------------
def curve_within(record: dict[str, Any], budget: int) -> list[tuple[int, float]]:
    """(samples, accuracy) points of a run up to `budget` samples."""
    return [(int(p[0]), float(p[1])) for p in record["curve"] if int(p[0]) <= budget]


def first_crossing(curve: list[tuple[int, float]], target: float) -> int | None:
    """N(b): samples at the first evaluation whose accuracy is >= target."""
    for samples, acc in curve:
        if acc >= target:
            return samples
    return None


def covers(record: dict[str, Any], target: float | None, budget: int, patience: int | None) -> bool:
    """Whether a finished run answers a request for (target, budget) exactly as a new
    run would: training is deterministic given the work dir's fingerprint, so a run
    that reached the target within the budget, or ran at least the whole budget,
    gives the same curve prefix and the same N(b)."""
    if target is not None and first_crossing(curve_within(record, budget), target) is not None:
        return True
    if record["stop"] == "budget" and record["samples_trained"] >= budget:
        return True
    return (
        target is None
        and record["stop"] == "plateau"
        and record.get("plateau_patience") == patience
        and record["max_samples"] >= budget
    )


# --- the work directory ----------------------------------------------------------------
class WorkDir:
    """`<root>/config.json` (the fingerprint) + `<root>/runs/b<b>-seed<s>.json`."""

    def __init__(self, root: str | Path, fingerprint: dict[str, Any], *, fresh: bool = False):
        self.root = Path(root)
        self.runs_dir = self.root / "runs"
        self.fingerprint = fingerprint
        if fresh:
            self.clear()
        self._check_or_claim()

    def clear(self) -> None:
        """Remove only files this class writes."""
        for p in self.runs_dir.glob("b*-seed*.json") if self.runs_dir.is_dir() else ():
            p.unlink()
        (self.root / "config.json").unlink(missing_ok=True)

    def _check_or_claim(self) -> None:
        cfg_path = self.root / "config.json"
        if cfg_path.exists():
            try:
                old = load_json(cfg_path, what="work-dir config")
            except ArtifactError as e:
                raise UndercapError(f"{e}; use a new --work-dir or --fresh") from e
            old_fp = old.get("fingerprint", {})
            diff = sorted(
                k
                for k in set(old_fp) | set(self.fingerprint)
                if old_fp.get(k) != self.fingerprint.get(k)
            )
            if old.get("schema") != WORKDIR_SCHEMA or diff:
                raise UndercapError(
                    f"work dir {self.root} holds runs of a different estimate (differs in: "
                    f"{', '.join(diff) or 'schema'}); use a new --work-dir or --fresh"
                )
            return
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        save_json(cfg_path, {"schema": WORKDIR_SCHEMA, "fingerprint": self.fingerprint})

    def run_path(self, batch_size: int, seed: int) -> Path:
        return self.runs_dir / f"b{batch_size}-seed{seed}.json"

    def load_runs(self) -> dict[tuple[int, int], dict[str, Any]]:
        """Every readable run record; unreadable ones (impossible with atomic writes,
        but a user may edit files) are skipped and so re-run."""
        out: dict[tuple[int, int], dict[str, Any]] = {}
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        for p in sorted(self.runs_dir.glob("b*-seed*.json")):
            try:
                rec = load_json(p, what="run record")
                if rec.get("schema") != RUN_SCHEMA:
                    continue
                out[(int(rec["batch_size"]), int(rec["seed"]))] = rec
            except (ArtifactError, KeyError, TypeError, ValueError):
                continue
        return out


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
