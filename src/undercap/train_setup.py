"""Set-up and result assembly for device training (train.py runs the loop).

The model, optimizer and learning rate are set up exactly as the efficiency estimate
does (pretrain.initial_model / optimizer_settings, loop.scaled_lr: sqrt scaling from
the largest batch, paper Sec. 4.2), so N(b) measured on the proxy and the device run
are the same procedure. `config` is the run's identity: a checkpoint written under a
different one is refused on resume.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from undercap.datasets.base import Splits
from undercap.devices.base import Device
from undercap.errors import UndercapError
from undercap.guard import READ_ONLY, PowerGuard
from undercap.loop import LoopConfig, LoopResult, Trainer, scaled_lr
from undercap.train_result import TrainResult
from undercap.workload import Workload


def _check_args(
    batch_size: int, max_batch_size: int, target: float, max_samples: int, every: int
) -> None:
    if batch_size <= 0 or max_samples <= 0 or every <= 0:
        raise UndercapError("batch size, sample budget and evaluation interval must be positive")
    if max_batch_size < batch_size:
        raise UndercapError(
            f"--max-batch-size {max_batch_size} is below --batch-size {batch_size}; "
            "the learning rate is scaled from the largest batch (pass the largest one)"
        )
    if not 0.0 < target <= 1.0:
        raise UndercapError(f"target accuracy {target} must be a fraction in (0, 1]")


def _data_fingerprint(data: Splits) -> str:
    """Cheap identity of the splits: labels in order plus the first inputs."""
    h = hashlib.sha256()
    for t in (data.y_train, data.y_test, data.x_train[:64], data.x_test[:64]):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class RunSetup:
    model_name: str
    data: Splits
    batch_size: int
    seed: int
    freq_mhz: float | None
    power_limit_w: float | None
    guard_window_s: float
    max_samples: int
    trainer: Trainer
    workload: Workload
    cuda_sync: Any
    config: dict[str, Any]
    device_info: dict[str, Any]
    simulated: bool
    init: dict[str, Any]
    torch_device: str
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        device: Device,
        model_name: str,
        data: Splits,
        *,
        batch_size: int,
        target_accuracy: float,
        freq_mhz: float | None,
        power_limit_w: float | None,
        max_samples: int,
        eval_every_samples: int,
        eval_max_samples: int | None,
        base_lr: float | None,
        max_batch_size: int | None,
        weight_decay: float | None,
        pretrained: str | Path | None,
        seed: int,
        guard_window_s: float,
        torch_device: str,
    ) -> RunSetup:
        import torch

        from undercap.models import default_lr, workload_of
        from undercap.pretrain import (
            file_sha256,
            initial_model,
            optimizer_settings,
            resolve_torch_device,
        )

        b_max = max_batch_size or batch_size
        _check_args(batch_size, b_max, target_accuracy, max_samples, eval_every_samples)
        if power_limit_w is not None and not (math.isfinite(power_limit_w) and power_limit_w > 0):
            raise UndercapError(f"power limit {power_limit_w} must be a positive number of W")
        tdev = resolve_torch_device(torch_device)
        opt, wd = optimizer_settings(model_name, weight_decay)
        lr = scaled_lr(
            base_lr if base_lr is not None else default_lr(model_name), batch_size, b_max
        )
        model, init = initial_model(model_name, data, init_seed=seed, pretrained=pretrained)
        workload = workload_of(model, model_name, data.input_shape)
        cfg = LoopConfig(
            batch_size=batch_size,
            lr=lr,
            optimizer=opt,
            weight_decay=wd,
            target_accuracy=target_accuracy,
            max_samples=max_samples,
            eval_every_samples=eval_every_samples,
            eval_max_samples=eval_max_samples,
            seed=seed,
        )
        config = {
            **dataclasses.asdict(cfg),
            "model": model_name,
            "dataset": data.name,
            "data_fingerprint": _data_fingerprint(data),
            "n_train": data.n_train,
            "n_test": data.n_test,
            "max_batch_size": b_max,
            "pretrained_sha256": None if pretrained is None else file_sha256(pretrained)[:16],
            "device": device.name,
            "freq_mhz": freq_mhz,
            "power_limit_w": power_limit_w,
            "guard_window_s": guard_window_s,
        }
        info = device.info()
        warnings = []
        if not info.is_simulated and tdev == "cpu":
            warnings.append(
                "training ran on the host CPU (torch sees no CUDA GPU), not on the GPU "
                "whose clocks and power were managed"
            )
        if tdev != "cpu":
            data = dataclasses.replace(
                data,
                x_train=data.x_train.to(tdev),
                y_train=data.y_train.to(tdev),
                x_test=data.x_test.to(tdev),
                y_test=data.y_test.to(tdev),
            )
        return cls(
            model_name=model_name,
            data=data,
            batch_size=batch_size,
            seed=seed,
            freq_mhz=freq_mhz,
            power_limit_w=power_limit_w,
            guard_window_s=guard_window_s,
            max_samples=max_samples,
            trainer=Trainer(model, data, cfg, tdev),
            workload=workload,
            cuda_sync=torch.cuda.synchronize if tdev.startswith("cuda") else None,
            config=config,
            device_info=info.to_dict(),
            simulated=info.is_simulated,
            init=init,
            torch_device=tdev,
            warnings=warnings,
        )

    def result(
        self,
        loop: LoopResult,
        acc: dict[str, Any],
        *,
        guard: PowerGuard,
        freq_start: float | None,
        freq_final: float | None,
        energy_source: str,
        warnings: list[str],
        resumed_from: int | None,
        provenance: dict[str, Any],
    ) -> TrainResult:
        limit = self.power_limit_w
        events = [e.to_dict() for e in guard.events]
        warnings = list(warnings)
        exceeded = limit is not None and acc["peak_w"] > limit
        if any(e["action"] == READ_ONLY for e in events):
            warnings.append(
                f"power limit {limit:g} W exceeded for {acc['exceeded_windows']} window(s) of "
                f"{self.guard_window_s:g} s; read-only: cannot step down"
            )
        elif exceeded and events:
            warnings.append(
                f"robust peak power {acc['peak_w']:.2f} W went above the {limit:g} W limit "
                f"for up to one {self.guard_window_s:g} s guard window before the guard "
                "stepped the clock down (see guard events)"
            )
        elif exceeded:
            warnings.append(
                f"robust peak power {acc['peak_w']:.2f} W went above the {limit:g} W limit "
                f"(only in bursts shorter than the {self.guard_window_s:g} s guard window)"
            )
        t = acc["train_time_s"]
        return TrainResult(
            reached=loop.reached,
            time_to_accuracy_s=t if loop.reached else None,
            train_time_s=t,
            samples_to_target=loop.samples_to_target,
            samples_trained=loop.samples_trained,
            steps=loop.steps,
            final_accuracy=loop.final_accuracy,
            target_accuracy=float(self.trainer.cfg.target_accuracy or 0.0),
            energy_j=acc["energy_j"],
            energy_source=energy_source,
            peak_power_w=acc["peak_w"],
            max_raw_power_w=acc["max_raw_w"],
            mean_power_w=acc["energy_j"] / t if t > 0 else 0.0,
            eval_wall_s=loop.eval_wall_s,
            train_wall_s=loop.train_wall_s,
            batch_size=self.batch_size,
            lr=self.trainer.cfg.lr,
            freq_mhz_requested=self.freq_mhz,
            freq_mhz_start=freq_start,
            freq_mhz_final=freq_final,
            power_limit_w=limit,
            limit_exceeded=bool(exceeded),
            guard_window_s=self.guard_window_s,
            guard_events=tuple(events),
            simulated=self.simulated,
            device=self.device_info,
            model=self.model_name,
            dataset=self.data.name,
            curve=tuple(
                {"samples": p.samples, "accuracy": p.accuracy, "loss": p.loss} for p in loop.curve
            ),
            resumed_from=resumed_from,
            warnings=tuple(warnings),
            config={**self.config, "init": self.init, "torch_device": self.torch_device},
            provenance=provenance,
        )
