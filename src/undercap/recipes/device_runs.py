"""Training the comparison's configurations on the device, with a run cache.

Each (batch size, frequency, seed, power limit) is trained by train.train_on_device
on a freshly opened device (seed = the run's seed, so a simulated device's sensor
noise is reproducible and independent of the order runs happen in), from the same
pre-trained weights and with the same learning-rate scaling (b_max of the estimate)
as the efficiency estimates. Every result is a TrainResult JSON in the one cache
(kind "device-run"), keyed by everything that determines it, so re-running a
comparison reuses finished runs instead of training them again.
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
from undercap.data.spec import DataSpec
from undercap.errors import ArtifactError
from undercap.models.user import code_digest
from undercap.recipes.common import Log, TrainingSetup, stderr_log
from undercap.report.text import in_precision
from undercap.train.cap import FixedCap

#: (batch_size, freq_mhz, seed, power_limit_w, precision) -> the run (method fields
#: filled later)
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
    """A TrainFn (experiment.TrainFn) that trains on `device_name` with a run cache."""

    device_name: str
    model: str
    data: DataSpec  # the target
    setup: TrainingSetup
    target_accuracy: float
    cache: Cache
    device_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    progress: bool = True
    log: Log = stderr_log
    # "observed" (a read-only profile): train at the clocks as found, lock nothing
    clock: str = "chosen"
    trained: int = 0
    reused: int = 0
    _splits: Any = None

    def splits(self) -> Any:
        if self._splits is None:
            from undercap.data.spec import load_splits

            self._splits = load_splits(self.data, "cpu")
        return self._splits

    def key(
        self, b: int, f: float, seed: int, limit: Optional[float], precision: str = "fp32"
    ) -> dict[str, Any]:
        s = self.setup
        return {
            "device": self.device_name,
            "device_options": {k: str(v) for k, v in sorted(self.device_options.items())},
            "model": self.model,
            "data": self.data.key(),
            "batch_size": b,
            "freq_mhz": f,
            "seed": seed,
            "power_limit_w": limit,
            "target_accuracy": self.target_accuracy,
            "max_samples": s.max_samples,
            "eval": [s.eval_every_samples, s.eval_max_samples],
            "objective": [s.loss, s.metric],
            "user_code": code_digest(
                self.model, self.data.dataset, s.loss, s.metric, *s.recipe_paths.values()
            ),
            **({"recipe": s.recipe_paths} if any(s.recipe_paths.values()) else {}),
            # deterministic torch trains other kernels: not the same run (keys made
            # before the switch existed stay valid)
            **({"deterministic": True} if s.deterministic else {}),
            # which points were evaluated changes the evaluation time recorded, not the
            # run (keys made before the sparse plan existed are dense runs)
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
            self.trained += 1
        else:
            self.reused += 1
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

        plan = self.setup.plan(self.model, b, target_accuracy=self.target_accuracy, seed=seed)
        plan = dataclasses.replace(plan, precision=precision)
        spec = TrainSpec.of(
            plan,
            freq_mhz=f if self.clock == "chosen" else None,
            cap=FixedCap(limit),
            torch_device=self.setup.torch_device,
        )
        with open_device(self.device_name, seed=seed, **self.device_options) as device:
            return train(device, spec, self.splits(), RunOptions(progress=self.progress))


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
    ordered = sorted(choices, key=lambda c: limit_sort_key(c.power_limit_w))
    for c in ordered:
        here = f"{c.method}@{limit_label(c.power_limit_w)}"
        for seed in seeds:
            key = (c.batch_size, c.freq_mhz, seed, c.precision)
            prior = next(
                (
                    (name, run)
                    for lim, name, run in done.get(key, [])
                    if _reusable(lim, run, c.power_limit_w)
                ),
                None,
            )
            if prior is None:
                mixed = in_precision(c.precision)
                log(
                    f"run {here}: batch size {c.batch_size} at {c.freq_mhz:g} MHz{mixed}, seed {seed}"
                )
                run = train_fn(c.batch_size, c.freq_mhz, seed, c.power_limit_w, c.precision)
                done.setdefault(key, []).append((c.power_limit_w, here, run))
                shared_from = None
            else:
                shared_from, run = prior
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
