"""One node's part: its data, its profile, and one local round on its device under its
own cap. Torch, no Flower (client_app.py adapts Flower messages to these calls).

The local round is undercap's capped loop (train/api.py: the clock locked and restored,
the power sampler and guard holding the cap; a simulated device advances its virtual
clock by t(b, f) * b per step). A changing cap (`power-schedule`) is followed like
`--power-schedule`: Algorithm 1 re-selects (b, f) at each change
(train/session/follow.py), and the round ends after the same amount of work. The local
optimizer starts fresh every round from the global weights, its learning rate
sqrt-scaled from the largest batch (paper Sec. 4.2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

import torch

from undercap.artifacts.profile import Profile
from undercap.data.spec import DataSpec
from undercap.devices.base import Device
from undercap.errors import UndercapError
from undercap.train.cap import PowerSchedule, load_schedule
from undercap.train.loop import scaled_lr

IDLE_READINGS = 32  # power readings averaged for a node's idle power


@dataclass(frozen=True)
class LocalTask:
    """What the server asks of one node for one round (its per-node config)."""

    model: str
    batch_size: int
    freq_mhz: Optional[float]
    power_limit_w: Optional[float]
    local_samples: int
    base_lr: float  # at max_batch_size
    max_batch_size: int
    optimizer: str = "adam"  # "adam" (the model's) or "sgd"
    momentum: float = 0.0  # sgd only
    seed: int = 0
    round: int = 1
    fleet_time_s: float = 0.0  # the round's start on the fleet clock (for schedules)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> LocalTask:
        known = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        for k in ("freq_mhz", "power_limit_w"):
            if known.get(k) is not None and float(known[k]) <= 0:  # 0: none (Flower has no null)
                known[k] = None
        return cls(**known)


def node_splits(data: DataSpec, partition: str, part: int, n_parts: int, seed: int) -> Any:
    """This node's training part of `data` (partition.py) and the whole test split."""
    from undercap.fleet.partition import partition_indices
    from undercap.recipes.common import loaded_splits

    splits = loaded_splits(data)
    parts = partition_indices(splits.y_train.numpy(), n_parts, partition, seed)
    idx = torch.as_tensor(parts[part])
    return dataclasses.replace(splits, x_train=splits.x_train[idx], y_train=splits.y_train[idx])


def node_profile(
    device: Device,
    model: str,
    data: DataSpec,
    batch_sizes: Tuple[int, ...],
    cache_dir: Optional[str],
) -> Profile:
    """The node's own full (b, f) profile of the model (cached: a node profiles once;
    a full sweep, since any cap of a schedule may come)."""
    from undercap.artifacts.cache import Cache
    from undercap.recipes.common import model_input, profile_model

    inp = model_input(model, data)
    return profile_model(
        device,
        model,
        inp.shape,
        batch_sizes,
        num_classes=inp.num_classes,
        cache=Cache(cache_dir),
        progress=False,
        log=lambda _msg: None,
        task=inp.task,
    )


def idle_power_w(device: Device) -> float:
    """The node's board power with the GPU idle: the mean of a few sensor readings
    (what a node draws while it waits for the round's slowest node)."""
    readings = []
    for _ in range(IDLE_READINGS):
        readings.append(float(device.power_w()))
        device.wait_s(device.sensor_update_interval_s())
    return sum(readings) / len(readings)


def shifted(schedule: PowerSchedule, offset_s: float, horizon_s: float) -> PowerSchedule:
    """`schedule` as seen from `offset_s` on (the round's start on the fleet clock):
    the cap then at time 0, and every change within `horizon_s` after it."""
    times, limits = [0.0], [schedule.limit_at(offset_s)]
    t = schedule.next_change_after(offset_s)
    while t is not None and t - offset_s <= horizon_s and len(times) < 10_000:
        times.append(t - offset_s)
        limits.append(schedule.limit_at(t))
        t = schedule.next_change_after(t)
    return PowerSchedule(tuple(times), tuple(limits), f"{schedule.source}@{offset_s:g}s")


def load_node_schedule(path: Optional[str]) -> Optional[PowerSchedule]:
    if not path:
        return None
    if not Path(path).is_file():
        raise UndercapError(f"power schedule {path} does not exist on this node")
    return load_schedule(path)


def run_round(
    device: Device,
    model: torch.nn.Module,
    input_shape: Tuple[int, ...],
    data: Any,
    task: LocalTask,
    *,
    schedule: Optional[PowerSchedule] = None,
    profile: Optional[Profile] = None,
    relative: Optional[Mapping[int, float]] = None,
) -> Dict[str, Any]:
    """Train `model` (the global weights loaded) for `task.local_samples` samples on
    `device` under the node's cap; the reply's metrics (records.NodeRound fields)."""
    from undercap.train.api import capped
    from undercap.train.cap import Cap, FixedCap
    from undercap.train.spec import TrainSpec

    follows = schedule is not None  # the cap changes: Algorithm 1 at every change
    if follows:
        slowest_s = (
            max((r.time_per_sample_s for r in profile.rows), default=1.0) if profile else 1.0
        )
        horizon = 100.0 * max(1.0, task.local_samples * slowest_s)
        cap: Cap = shifted(schedule, task.fleet_time_s, horizon)
    else:
        cap = FixedCap(task.power_limit_w)
    # the node's round: its batch size and clock under its cap, in a loop of its own
    spec = TrainSpec(None, task.batch_size, None, freq_mhz=task.freq_mhz, cap=cap)
    with capped(
        device,
        spec,
        model=model,
        input_shape=input_shape,
        profile=profile if follows else None,
        relative=dict(relative or {}) if follows else None,
    ) as run:
        steps = _train(run, model, data, task)
    res = run.result()
    return {
        "batch_size": int(res.batch_size),
        "freq_mhz": res.freq_mhz_start,
        "power_limit_w": res.power_limit_w,
        "local_steps": int(steps),
        "samples": int(res.samples),
        "device_time_s": float(res.train_time_s + res.pause_time_s),
        "energy_j": float(res.energy_j),
        "peak_power_w": float(res.peak_power_w),
        "mean_power_w": float(res.mean_power_w),
        "limit_exceeded": bool(res.limit_exceeded),  # a segment over its own limit too
        "guard_events": len(res.guard_events),
    }


def _train(cap: Any, model: torch.nn.Module, data: Any, task: LocalTask) -> int:
    """The local steps: shuffled batches of the node's data at the batch size the cap
    says (a changing cap may switch it: the learning rate follows by sqrt(b/b_max))."""
    gen = torch.Generator().manual_seed(int(task.seed) * 100_003 + int(task.round))
    torch.manual_seed(int(task.seed) * 100_003 + int(task.round))
    opt = _optimizer(model, task, cap.batch_size)
    order, pos, steps, b_now = torch.randperm(data.n_train, generator=gen), 0, 0, cap.batch_size
    model.train()
    while cap.samples < task.local_samples:
        b = cap.batch_size
        if b != b_now:
            for group in opt.param_groups:
                group["lr"] = _lr(task, b)
            b_now = b
        if pos + b > data.n_train:
            order, pos = torch.randperm(data.n_train, generator=gen), 0
        idx = order[pos : pos + b] if b <= data.n_train else torch.randint(data.n_train, (b,))
        pos += b
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        loss.backward()
        opt.step()
        cap.step(b)
        steps += 1
    return steps


def _lr(task: LocalTask, b: int) -> float:
    return scaled_lr(task.base_lr, b, task.max_batch_size)


def _optimizer(model: torch.nn.Module, task: LocalTask, b: int) -> torch.optim.Optimizer:
    if task.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=_lr(task, b), momentum=task.momentum)
    if task.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=_lr(task, b))
    raise UndercapError(f"local optimizer {task.optimizer!r}: use adam or sgd")
