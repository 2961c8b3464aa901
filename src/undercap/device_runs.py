"""Training one configuration on the device for the comparison, with a run cache.

Each (batch size, frequency, seed, power limit) is trained by train.train_on_device
on a freshly opened device (seed = the run's seed, so a simulated device's sensor
noise is reproducible and independent of the order runs happen in), from the same
pre-trained weights and with the same learning-rate scaling (b_max of the estimate)
as the efficiency estimates. Every result is saved as a TrainResult JSON under the
cache, keyed by everything that determines it, so re-running a comparison reuses
finished runs instead of training them again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from undercap import __version__
from undercap.artifacts import load_json
from undercap.comparison import RunRecord
from undercap.errors import ArtifactError
from undercap.scenario import Log, TrainingSetup, short_hash, stderr_log
from undercap.train_result import TrainResult, load_train_result, save_train_result


def run_record(result: TrainResult, *, seed: int) -> RunRecord:
    """The comparison's view of one training result (method fields filled later)."""
    return RunRecord(
        method="",
        power_limit_w=result.power_limit_w,
        seed=seed,
        batch_size=result.batch_size,
        freq_mhz=float(result.freq_mhz_start or result.freq_mhz_requested or 0.0),
        reached=result.reached,
        time_to_accuracy_s=result.time_to_accuracy_s,
        energy_j=result.energy_j,
        peak_power_w=result.peak_power_w,
        mean_power_w=result.mean_power_w,
        samples_to_target=result.samples_to_target,
        samples_trained=result.samples_trained,
        final_accuracy=result.final_accuracy,
        guard_events=len(result.guard_events),
        final_freq_mhz=result.freq_mhz_final,
        train_s=result.train_time_s,
    )


@dataclass
class DeviceTrainer:
    """A TrainFn (experiment.TrainFn) that trains on `device_name` with a run cache."""

    device_name: str
    model: str
    data: Any  # pretrain.DataSpec of the target
    setup: TrainingSetup
    target_accuracy: float
    cache_dir: Path
    device_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    progress: bool = True
    log: Log = stderr_log
    trained: int = 0
    reused: int = 0
    _splits: Any = None

    def splits(self) -> Any:
        if self._splits is None:
            from undercap.pretrain import load_splits

            self._splits = load_splits(self.data, "cpu")
        return self._splits

    def key(self, b: int, f: float, seed: int, limit: float | None) -> dict[str, Any]:
        from undercap.pretrain import file_sha256

        s = self.setup
        return {
            "device": self.device_name,
            "device_options": {k: str(v) for k, v in sorted(self.device_options.items())},
            "model": self.model,
            "data": repr(self.data),
            "batch_size": b,
            "freq_mhz": f,
            "seed": seed,
            "power_limit_w": limit,
            "target_accuracy": self.target_accuracy,
            "max_samples": s.max_samples,
            "eval": [s.eval_every_samples, s.eval_max_samples],
            "lr": s.lr,
            "b_max": max(s.batch_sizes),
            "pretrained_sha256": file_sha256(s.pretrained) if s.pretrained else None,
            "undercap_version": __version__,
        }

    def __call__(self, b: int, f: float, seed: int, limit: float | None) -> RunRecord:
        key = self.key(b, f, seed, limit)
        path = self.cache_dir / f"b{b}-f{f:g}-s{seed}-{short_hash(key)}.json"
        result = self._cached(path, key)
        if result is None:
            result = self._train(b, f, seed, limit)
            save_train_result(path, result)
            save_json_key(path, key)
            self.trained += 1
        else:
            self.reused += 1
        return run_record(result, seed=seed)

    def _cached(self, path: Path, key: dict[str, Any]) -> TrainResult | None:
        key_path = path.with_suffix(".key.json")
        if not (path.exists() and key_path.exists()):
            return None
        try:
            if load_json(key_path).get("key") != key:
                return None
            result = load_train_result(path)
        except (ArtifactError, TypeError):
            return None
        self.log(f"  reusing finished run {path.name}")
        return result

    def _train(self, b: int, f: float, seed: int, limit: float | None) -> TrainResult:
        from undercap.devices import open_device
        from undercap.train import train_on_device

        s = self.setup
        with open_device(self.device_name, seed=seed, **self.device_options) as device:
            return train_on_device(
                device,
                self.model,
                self.splits(),
                batch_size=b,
                target_accuracy=self.target_accuracy,
                freq_mhz=f,
                power_limit_w=limit,
                seed=seed,
                progress=self.progress,
                **s.train_kwargs(),
            )


def save_json_key(path: Path, key: dict[str, Any]) -> None:
    from undercap.artifacts import save_json

    save_json(path.with_suffix(".key.json"), {"key": key})
