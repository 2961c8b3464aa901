"""Training the comparison's configurations on the device, with a run cache.

Each (batch size, frequency, seed, power limit) trains on a freshly opened device
(seeded with the run's seed, so a simulated sensor's noise does not depend on the
order runs happen in), from the estimates' pre-trained weights and with their
learning-rate scaling (their b_max). Every result is a TrainResult in the one cache
(kind "device-run"), keyed by everything that determines it: a re-run comparison
reuses finished runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from undercap import __version__
from undercap.artifacts.cache import Cache
from undercap.artifacts.comparison import ChoiceRecord, RunRecord, limit_label, limit_sort_key
from undercap.artifacts.io import file_sha256
from undercap.artifacts.train_result import TrainResult
from undercap.errors import ArtifactError
from undercap.models.user import code_digest
from undercap.recipes.common import Log, TrainingSetup, loaded_splits, stderr_log
from undercap.report.text import in_precision
from undercap.train.cap import FixedCap

#: (batch_size, freq_mhz, seed, power_limit_w, precision) -> the run (method fields unset)
TrainFn = Callable[[int, float, int, Optional[float], str], RunRecord]


def run_record(result: TrainResult, *, seed: int) -> RunRecord:
    """The comparison's view of one training result (method fields filled later): these,
    and the result's fields of RunRecord's other names."""
    own = {
        "method": "",
        "seed": seed,
        "freq_mhz": float(result.freq_mhz_start or result.freq_mhz_requested or 0.0),
        "guard_events": sum(e.get("action") == "step_down" for e in result.guard_events),
        "final_freq_mhz": result.freq_mhz_final,
        "train_s": result.train_time_s,
        "limit_exceeded": bool(result.limit_exceeded),
        "shared_from": None,
    }
    names = [f.name for f in dataclasses.fields(RunRecord) if f.name not in own]
    return RunRecord(**own, **{name: getattr(result, name) for name in names})


@dataclass
class DeviceTrainer:
    """A TrainFn that trains `cfg`'s model on its target on its device, with a run cache."""

    cfg: Any  # a CompareConfig (recipes/compare.py imports this module)
    setup: TrainingSetup
    target_accuracy: float
    cache: Cache
    progress: bool = True
    log: Log = stderr_log
    # "observed" (a read-only profile): train at the clocks as found, lock nothing
    clock: str = "chosen"

    def key(
        self, b: int, f: float, seed: int, limit: Optional[float], precision: str = "fp32"
    ) -> dict[str, Any]:
        s, cfg = self.setup, self.cfg
        return {
            "device": cfg.device,
            "device_options": {k: str(v) for k, v in sorted(cfg.device_options.items())},
            "model": cfg.model,
            "data": cfg.target.key(),
            "batch_size": b,
            "freq_mhz": f,
            "seed": seed,
            "power_limit_w": limit,
            "target_accuracy": self.target_accuracy,
            "max_samples": s.max_samples,
            "eval": [s.eval_every_samples, s.eval_max_samples],
            "objective": [s.loss, s.metric],
            "user_code": code_digest(
                cfg.model, cfg.target.dataset, s.loss, s.metric, *s.recipe_paths.values()
            ),
            **({"recipe": s.recipe_paths} if any(s.recipe_paths.values()) else {}),
            # deterministic torch trains other kernels: another run (older keys stay valid)
            **({"deterministic": True} if s.deterministic else {}),
            # the points evaluated change the evaluation time, not the run (older keys: dense)
            **({"eval_schedule": "sparse"} if s.eval_schedule == "sparse" else {}),
            **({"precision": precision} if precision != "fp32" else {}),
            "lr": s.lr,
            "b_max": max(s.batch_sizes),
            "pretrained_sha256": file_sha256(s.pretrained) if s.pretrained else None,
            "undercap_version": __version__,
        }

    def __call__(
        self, b: int, f: float, seed: int, limit: Optional[float], precision: str = "fp32"
    ) -> RunRecord:
        entry = self.cache.entry("device-run", self.key(b, f, seed, limit, precision))
        result = self._cached(entry)
        if result is None:
            result = self._train(b, f, seed, limit, precision)
            if entry is not None:
                entry.store_json(result.to_dict())
        return run_record(result, seed=seed)

    def _cached(self, entry: Any) -> Optional[TrainResult]:
        obj = None if entry is None else entry.load_json()
        if obj is None:
            return None
        try:
            result = TrainResult.from_dict(obj)
        except (ArtifactError, TypeError):
            return None
        self.log(f"  reusing finished run {entry.dir}")
        return result

    def _train(
        self, b: int, f: float, seed: int, limit: Optional[float], precision: str
    ) -> TrainResult:
        from undercap.devices import open_device
        from undercap.train import RunOptions, TrainSpec, train

        plan = self.setup.plan(self.cfg.model, b, target_accuracy=self.target_accuracy, seed=seed)
        plan = dataclasses.replace(plan, precision=precision)
        spec = TrainSpec.of(
            plan,
            freq_mhz=f if self.clock == "chosen" else None,
            cap=FixedCap(limit),
            torch_device=self.setup.torch_device,
        )
        options = RunOptions(progress=self.progress)
        with open_device(self.cfg.device, seed=seed, **self.cfg.device_options) as device:
            return train(device, spec, loaded_splits(self.cfg.target), options)


def _reusable(trained_limit: Optional[float], run: RunRecord, limit: Optional[float]) -> bool:
    """Is a run trained under `trained_limit` the run `limit` would give? Yes for the
    same limit; and if the guard never acted under a limit at most as tight, because
    then its window means never passed `trained_limit` <= `limit` either."""
    if trained_limit == limit:
        return True
    if run.guard_events:
        return False
    return trained_limit is not None and (limit is None or trained_limit <= limit)


def train_all(
    choices: Sequence[ChoiceRecord],
    seeds: Sequence[int],
    train_fn: TrainFn,
    *,
    log: Log = stderr_log,
) -> list[RunRecord]:
    """Train every (choice, seed), tight limits first, reusing identical runs."""
    done: dict[tuple[int, float, int, str], list[tuple[Optional[float], str, RunRecord]]] = {}
    runs: list[RunRecord] = []
    for c in sorted(choices, key=lambda c: limit_sort_key(c.power_limit_w)):
        here = f"{c.method}@{limit_label(c.power_limit_w)}"
        for seed in seeds:
            trained = done.setdefault((c.batch_size, c.freq_mhz, seed, c.precision), [])
            shared = [
                (name, run) for lim, name, run in trained if _reusable(lim, run, c.power_limit_w)
            ]
            if shared:
                shared_from, run = shared[0]
            else:
                mixed = in_precision(c.precision)
                log(
                    f"run {here}: batch size {c.batch_size} at {c.freq_mhz:g} MHz{mixed}, seed {seed}"
                )
                run = train_fn(c.batch_size, c.freq_mhz, seed, c.power_limit_w, c.precision)
                trained.append((c.power_limit_w, here, run))
                shared_from = None
            runs.append(
                dataclasses.replace(
                    run,
                    method=c.method,
                    power_limit_w=c.power_limit_w,
                    seed=seed,
                    shared_from=shared_from,
                )
            )
    return runs
