"""Set-up and result assembly for device training (train.py runs the loop).

The model, optimizer and learning rate are set up exactly as the efficiency estimate
does (models.weights.initial_model, the registry's optimizer, loop.scaled_lr: sqrt scaling from
the largest batch, paper Sec. 4.2), so N(b) measured on the proxy and the device run
are the same procedure. `config` is the run's identity: a checkpoint written under a
different one is refused on resume.
"""

import dataclasses
import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from undercap.artifacts.train_result import TrainResult
from undercap.artifacts.workload import Workload
from undercap.data.base import Splits
from undercap.devices.base import Device
from undercap.train.evalplan import look_order, plan_for
from undercap.train.guard import BATCH_DOWN, READ_ONLY, PowerGuard
from undercap.train.loop import LoopConfig, LoopResult, Trainer
from undercap.train.spec import TrainSpec


def _data_fingerprint(data: Splits) -> str:
    """Cheap identity of the splits: labels in order plus the first inputs."""
    h = hashlib.sha256()
    for t in (data.y_train, data.y_test, data.x_train[:64], data.x_test[:64]):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class RunSetup:
    """A training run ready to go: the spec, the data on the torch device, the model
    in its loop, its workload, and `config`, the run's identity for checkpoints."""

    spec: TrainSpec
    data: Splits
    trainer: Trainer
    workload: Workload
    cuda_sync: Any
    config: Dict[str, Any]
    device_info: Dict[str, Any]
    simulated: bool
    init: Dict[str, Any]
    torch_device: str
    warnings: List[str] = field(default_factory=list)

    @classmethod
    def build(cls, device: Device, spec: TrainSpec, data: Splits) -> "RunSetup":
        import torch

        from undercap.models.weights import initial_model
        from undercap.models.workload import workload_of
        from undercap.train.loop import resolve_torch_device

        spec.validate()
        tdev = resolve_torch_device(spec.torch_device)
        cfg = spec.loop_config()
        model, init = initial_model(
            spec.model, data, init_seed=spec.seed, pretrained=spec.pretrained
        )
        info = device.info()
        warnings = []
        if not info.is_simulated and tdev == "cpu":
            warnings.append(
                "training ran on the host CPU (torch sees no CUDA GPU), not on the GPU "
                "whose clocks and power were managed"
            )
        on_device = _to_torch_device(data, tdev)
        trainer = Trainer(model, on_device, cfg, tdev)
        trainer.plan = plan_for(spec)
        if trainer.plan is not None:
            trainer.reorder_eval(look_order(trainer.eval_items, spec.seed))
        return cls(
            spec=spec,
            data=on_device,
            trainer=trainer,
            workload=workload_of(model, spec.model, data.input_shape, data.task),
            cuda_sync=torch.cuda.synchronize if tdev.startswith("cuda") else None,
            config=_identity(spec, cfg, data, device.name),
            device_info=info.to_dict(),
            simulated=info.is_simulated,
            init=init,
            torch_device=tdev,
            warnings=warnings,
        )

    def result_config(self) -> Dict[str, Any]:
        """The result's `config`: the run's identity, its weights and torch device."""
        return {
            **self.config,
            "init": self.init,
            "torch_device": self.torch_device,
            "deterministic": self.trainer.cfg.deterministic,
        }

    def result(
        self,
        loop: LoopResult,
        acc: Dict[str, Any],
        *,
        guard: PowerGuard,
        freq_start: Optional[float],
        freq_final: Optional[float],
        energy_source: str,
        warnings: List[str],
        resumed_from: Optional[int],
        provenance: Dict[str, Any],
        segments: Tuple[Dict[str, Any], ...] = (),
        schedule: Optional[str] = None,
        clocks: Optional[str] = None,
    ) -> TrainResult:
        spec, limit = self.spec, self.spec.power_limit_w
        events = [e.to_dict() for e in guard.events]
        warnings = list(warnings) + limit_warnings(acc, events, limit, spec.guard_window_s)
        over = [s for s in segments if _over(s)]
        warnings += [_over_warning(s) for s in over]
        t = acc["train_time_s"]
        elapsed = t + acc.get("pause_time_s", 0.0)  # waiting for power counts to the target
        return TrainResult(
            **_loop_fields(loop),
            time_to_accuracy_s=elapsed if loop.reached else None,
            train_time_s=t,
            target_accuracy=float(self.trainer.cfg.target_accuracy or 0.0),
            energy_j=acc["energy_j"],
            energy_source=energy_source,
            peak_power_w=acc["peak_w"],
            max_raw_power_w=acc["max_raw_w"],
            mean_power_w=acc["energy_j"] / elapsed if elapsed > 0 else 0.0,
            batch_size=spec.batch_size,
            lr=self.trainer.cfg.lr,
            freq_mhz_requested=spec.freq_mhz,
            freq_mhz_start=freq_start,
            freq_mhz_final=freq_final,
            power_limit_w=limit,
            limit_exceeded=bool(over) if segments else limit is not None and acc["peak_w"] > limit,
            guard_window_s=spec.guard_window_s,
            guard_events=tuple(events),
            simulated=self.simulated,
            device=self.device_info,
            model=spec.model,
            dataset=self.data.name,
            resumed_from=resumed_from,
            pause_time_s=acc.get("pause_time_s", 0.0),
            eval_time_s=acc.get("eval_time_s", 0.0),
            evaluation=_evaluation(self.trainer, loop),
            segments=tuple(segments),
            schedule=schedule,
            warnings=tuple(warnings),
            config=self.result_config(),
            provenance=provenance,
            clocks=clocks,
        )


def _loop_fields(loop: LoopResult) -> Dict[str, Any]:
    """What the loop itself reports, as the result's fields."""
    keys = ("reached", "samples_to_target", "samples_trained", "steps", "final_accuracy")
    out: Dict[str, Any] = {k: getattr(loop, k) for k in keys}
    out.update(eval_wall_s=loop.eval_wall_s, train_wall_s=loop.train_wall_s)
    out["curve"] = tuple(asdict(p) for p in loop.curve)
    return out


def _evaluation(trainer: Trainer, loop: LoopResult) -> Dict[str, Any]:
    """What the run evaluated: its plan's counts, or every grid point (dense)."""
    if trainer.plan is not None:
        return trainer.plan.stats()
    n = len(loop.curve)
    return {"schedule": "dense", "looks": n, "full_evaluations": n, "screened_items": 0}


def _to_torch_device(data: Splits, tdev: str) -> Splits:
    if tdev == "cpu":
        return data
    return dataclasses.replace(
        data,
        x_train=data.x_train.to(tdev),
        y_train=data.y_train.to(tdev),
        x_test=data.x_test.to(tdev),
        y_test=data.y_test.to(tdev),
    )


def run_identity(spec: TrainSpec, data: Splits, device: str) -> Dict[str, Any]:
    """The identity a checkpoint of this run holds (RunSetup.config), without building
    the model: what a run checks before it changes anything."""
    spec.validate()
    return _identity(spec, spec.loop_config(), data, device)


def _identity(spec: TrainSpec, cfg: LoopConfig, data: Splits, device: str) -> Dict[str, Any]:
    """Everything that makes a run this run: a checkpoint of another is refused. The cap
    is not part of it: a run resumes under another cap (runner.py), as a cap that
    changes during training already changes under it."""
    from undercap.artifacts.io import file_sha256
    from undercap.models.user import code_digest

    sha = None if spec.pretrained is None else file_sha256(spec.pretrained, what="weights file")
    recipe = (spec.optimizer_factory, spec.lr_scheduler, spec.train_step)
    loop = dataclasses.asdict(cfg)
    if not loop["deterministic"]:  # checkpoints from before the switch existed resume
        del loop["deterministic"]
    return {
        **loop,
        "model": spec.model,
        "dataset": data.name,
        "data_fingerprint": _data_fingerprint(data),
        "n_train": data.n_train,
        "n_test": data.n_test,
        "max_batch_size": spec.b_max,
        "pretrained_sha256": None if sha is None else sha[:16],
        "device": device,
        "freq_mhz": spec.freq_mhz,
        "guard_window_s": spec.guard_window_s,
        "user_code": code_digest(spec.model, data.name, spec.loss, spec.metric, *recipe),
    }


def _over(segment: Dict[str, Any]) -> bool:
    """A training segment whose robust peak went above its own limit."""
    limit, peak = segment.get("power_limit_w"), segment.get("peak_power_w")
    return segment.get("batch_size") is not None and None not in (limit, peak) and peak > limit


def _over_warning(s: Dict[str, Any]) -> str:
    return (
        f"segment {s['start_s']:.3g}-{s['end_s']:.3g} s: robust peak "
        f"{s['peak_power_w']:.2f} W above its {s['power_limit_w']:g} W limit"
    )


def limit_warnings(
    acc: Dict[str, Any], events: List[Dict[str, Any]], limit: Optional[float], window_s: float
) -> List[str]:
    """What to say about the power limit after a run (a run never exceeds it silently)."""
    if limit is None:
        return []
    if any(e["action"] == READ_ONLY for e in events):
        return [
            f"power limit {limit:g} W exceeded for {acc['exceeded_windows']} window(s) of "
            f"{window_s:g} s; read-only: cannot step down"
        ]
    if acc["peak_w"] <= limit:
        return []
    if events:
        what = "batch size" if any(e["action"] == BATCH_DOWN for e in events) else "clock"
        return [
            f"robust peak power {acc['peak_w']:.2f} W went above the {limit:g} W limit "
            f"for up to one {window_s:g} s guard window before the guard "
            f"stepped the {what} down (see guard events)"
        ]
    return [
        f"robust peak power {acc['peak_w']:.2f} W went above the {limit:g} W limit "
        f"(only in bursts shorter than the {window_s:g} s guard window)"
    ]
