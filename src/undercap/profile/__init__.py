"""STEP 1: measure the lookup table t(b, f), P(b, f) on a device (paper Section 4.1).

Each configuration runs mini-batches of the real model until time per sample and peak
power are known well enough (measure.py), and its row carries the safety margin
selection adds to the peak (margin.py). Two sweeps (sweep.py): full, every batch size x
every frequency; or efficient, for one power limit, only what it takes to find each
batch size's highest feasible clock (given r(b), skipping batch sizes that provably
cannot win): it picks what Algorithm 1 on the full table would. What profiling cost,
and what the shortcuts saved, is recorded in the profile's `cost`.
"""

import dataclasses
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from undercap import defaults
from undercap.artifacts.profile import Profile, ProfileRow
from undercap.artifacts.provenance import provenance
from undercap.devices.base import Device, controlled
from undercap.devices.sampler import PowerSampler
from undercap.errors import DeviceError, UndercapError
from undercap.profile.margin import near_band_w
from undercap.profile.measure import Measurer, ProfileSettings
from undercap.profile.stepper import Stepper
from undercap.profile.sweep import SweepOutcome, efficient_sweep, full_plan
from undercap.report.progress import bar as progress_bar

DEFAULT_BATCH_SIZES = defaults.PROFILE_BATCH_SIZES
#: how rows are measured; part of every cached profile's key (recipes/common.py), so a
#: profile measured before adaptive lengths and margins is measured again
PROFILE_METHOD = "adaptive/1: min windows, 95% CI stop, per-batch warm-up, margins"

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "PROFILE_METHOD",
    "ProfileSettings",
    "profile_precisions",
    "run_profile",
]


def run_profile(
    device: Device,
    model_name: str,
    input_shape: Sequence[int],
    batch_sizes: Optional[Sequence[int]] = None,
    *,
    num_classes: int = 10,
    power_limit_w: Optional[float] = None,
    efficient: Optional[bool] = None,
    freqs_mhz: Optional[Sequence[float]] = None,
    settings: Optional[ProfileSettings] = None,
    torch_device: str = "auto",
    progress: bool = True,
    task: Optional[str] = None,
    relative: Optional[Mapping[int, float]] = None,
    margin_w: Optional[float] = None,
    prior: Optional[Profile] = None,
    precision: str = "fp32",
) -> Profile:
    """Profile `model_name` on `device` in `precision` (fp32, or fp16/bf16 mixed
    precision: rows carry it; profile_precisions measures several). With a power limit
    the efficient sweep is used unless `efficient=False`; `relative` (r(b)) lets it skip
    batch sizes that cannot win, and `margin_w` replaces the measured margins in its
    feasibility test. Rows of `prior` (same device and model) are reused and its cost
    added. Read-only devices are measured at their current clock only.
    `task` names your own model's task where it cannot be inferred: "classification",
    "next-token", "sequence-classification", "token-classification", "masked-lm" or
    "seq2seq"."""
    settings = settings or ProfileSettings()
    shape = tuple(int(x) for x in input_shape)
    efficient = bool(power_limit_w is not None) if efficient is None else efficient
    if efficient and power_limit_w is None:
        raise UndercapError("the efficient sweep needs --power-limit")
    wall0 = time.monotonic()
    stepper = _stepper(
        device, model_name, shape, num_classes, settings.seed, task, precision, torch_device
    )
    mixed = "" if precision == "fp32" else f" {precision}"
    bar = progress_bar(progress, desc=f"profile {model_name} on {device.name}{mixed}", unit="cfg")
    prior_rows = _prior_rows(prior, device, model_name, precision)
    run = Measurer(device, stepper, settings, bar.update, prior_rows)
    energy0, dev_t0 = device.energy_j(), device.now_s()
    outcome: Optional[SweepOutcome] = None
    with PowerSampler(device, rate_hz=settings.sample_rate_hz) as whole, controlled(device):
        freqs = _frequencies(run, freqs_mhz)
        fitting = _fitting_batch_sizes(run, batch_sizes or DEFAULT_BATCH_SIZES)
        if efficient and run.can_control:
            outcome = _efficient(run, fitting, freqs, power_limit_w, relative, margin_w)  # type: ignore[arg-type]
        else:
            bar.total = len(fitting) * len(freqs)
            for b, i in full_plan(fitting, len(freqs)):  # freqs ascending, or [None]
                run.measure(b, freqs[i])
    bar.close()
    rows = _rows(run, fitting, model_name, device.name, precision)
    spent = (device.now_s() - dev_t0, _energy(device, whole, energy0), time.monotonic() - wall0)
    cost = _cost(run, rows, fitting, freqs, spent, outcome, prior)
    mode = "efficient" if outcome is not None else ("read-only" if not run.can_control else "full")
    sweep = _sweep_record(run, outcome, power_limit_w, relative, margin_w, freqs)
    return _artifact(run, rows, model_name, shape, mode, power_limit_w, cost, sweep)


def _stepper(
    device: Device,
    model: str,
    shape: Tuple[int, ...],
    num_classes: int,
    seed: int,
    task: Optional[str],
    precision: str,
    torch_device: str,
) -> Stepper:
    """The host's steps of `model` in `precision`, checked to be one the device runs."""
    from undercap.train.loop import resolve_torch_device
    from undercap.train.loop.precision import check_precision

    check_precision(device, precision)
    host = resolve_torch_device(torch_device)
    return Stepper(model, shape, num_classes, host, seed, task, precision, device.is_simulated)


def _efficient(
    run: Measurer,
    fitting: List[int],
    freqs: List[Optional[float]],
    limit: float,
    relative: Optional[Mapping[int, float]],
    margin_w: Optional[float],
) -> SweepOutcome:
    def margin(row: ProfileRow) -> float:
        return (row.peak_margin_w or 0.0) if margin_w is None else margin_w

    def feasible(row: ProfileRow) -> bool:
        return row.peak_power_w + margin(row) <= limit

    def near(row: ProfileRow) -> bool:
        band = near_band_w(row, run.policy, run.settings.sample_rate_hz)
        return abs(row.peak_power_w + margin(row) - limit) <= band

    rel = None if relative is None else {int(b): float(r) for b, r in relative.items()}
    return efficient_sweep(
        fitting, len(freqs), lambda b, i: run.measure(b, freqs[i]), feasible, near, rel
    )


def profile_precisions(precisions: Sequence[str], **kwargs: Any) -> Profile:
    """run_profile in each precision (`kwargs` as run_profile's), as one profile: every
    row carries its precision; the cost is the sum; the workload is the first's."""
    parts = [run_profile(precision=p, **kwargs) for p in precisions]
    first = parts[0]
    if len(parts) == 1:
        return first
    cost = dict(first.cost)
    for part in parts[1:]:
        for key in ("device_time_s", "energy_j", "wall_s", "configurations", "steps"):
            cost[key] = cost.get(key, 0) + part.cost.get(key, 0)
    return dataclasses.replace(
        first,
        rows=tuple(r for part in parts for r in part.rows),
        unfit_batch_sizes=tuple(sorted({b for part in parts for b in part.unfit_batch_sizes})),
        cost=cost,
    )


def _prior_rows(
    prior: Optional[Profile], device: Device, model: str, precision: str
) -> Optional[Dict[Tuple[int, float], ProfileRow]]:
    if prior is None:
        return None
    if prior.model != model or prior.device.get("name") != device.name:
        raise UndercapError(
            f"cannot reuse a profile of {prior.model} on {prior.device.get('name')} for "
            f"{model} on {device.name}"
        )
    return {(r.batch_size, r.freq_mhz): r for r in prior.rows if r.precision == precision}


def _rows(
    run: Measurer, fitting: List[int], model: str, device: str, precision: str
) -> List[ProfileRow]:
    rows = [r for k, r in run.rows.items() if k[0] in fitting]
    if not rows:
        raise UndercapError(f"no batch size fits {model} on {device}; try smaller --batch-sizes")
    return [dataclasses.replace(r, precision=precision) for r in rows]


def _energy(device: Device, whole: PowerSampler, energy0: Optional[float]) -> float:
    """Energy since `energy0`: the device's counter where it has one, else the sampler's."""
    energy1 = device.energy_j()
    if energy0 is None or energy1 is None:
        return whole.stats().energy_j
    return energy1 - energy0


def _cost(
    run: Measurer,
    rows: List[ProfileRow],
    fitting: List[int],
    freqs: List[Optional[float]],
    spent: Tuple[float, float, float],
    outcome: Optional[SweepOutcome],
    prior: Optional[Profile],
) -> Dict[str, Any]:
    """What profiling cost (`spent`: device time, energy, wall time; plus `prior`'s),
    and what the shortcuts saved against the whole grid with a warm-up each."""
    before = prior.cost if prior else {}
    measured = len([k for k in run.rows if k not in run.reused and k[0] in fitting])
    grid = len(fitting) * len(freqs)
    return {
        "device_time_s": spent[0] + float(before.get("device_time_s", 0.0)),
        "energy_j": spent[1] + float(before.get("energy_j", 0.0)),
        "wall_s": spent[2] + float(before.get("wall_s", 0.0)),
        "configurations": len(rows),
        "steps": run.warmup_steps + run.measured_steps + int(before.get("steps", 0)),
        "measured_steps": run.measured_steps + int(before.get("measured_steps", 0)),
        "warmup_steps": run.warmup_steps + int(before.get("warmup_steps", 0)),
        "reused_configurations": len(rows) - measured,
        "saved": {
            "configurations_not_measured": grid - len(rows),
            "grid_configurations": grid,
            "by_reason": dict(outcome.skipped) if outcome else {},
            "warmup_steps_shared": max(0, len(rows) - len(fitting)) * run.settings.warmup_steps,
        },
    }


def _sweep_record(
    run: Measurer,
    outcome: Optional[SweepOutcome],
    limit: Optional[float],
    relative: Optional[Mapping[int, float]],
    margin_w: Optional[float],
    freqs: List[Optional[float]],
) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "window_s": run.window_s,
        "sensor_update_interval_s": run.policy.sensor_update_s,
        "min_duration_s": run.min_duration_s,
        "margin": {**run.policy.to_dict(), "override_w": margin_w},
    }
    if outcome is not None:
        out.update(
            power_limit_w=limit,
            relative={str(b): r for b, r in sorted((relative or {}).items())} or None,
            pruned={str(b): why for b, why in sorted(outcome.pruned.items())},
            highest_feasible_mhz={
                str(b): None if i is None else freqs[i]
                for b, i in sorted(outcome.highest_feasible.items())
            },
        )
    return out


def _artifact(
    run: Measurer,
    rows: List[ProfileRow],
    model_name: str,
    shape: Tuple[int, ...],
    mode: str,
    power_limit_w: Optional[float],
    cost: Dict[str, Any],
    sweep: Dict[str, Any],
) -> Profile:
    info, settings = run.device.info(), run.settings
    return Profile(
        device=info.to_dict(),
        model=model_name,
        input_shape=shape,
        rows=tuple(sorted(rows, key=lambda r: (r.batch_size, r.freq_mhz))),
        simulated=info.is_simulated,
        mode=mode,
        power_limit_w=power_limit_w,
        unfit_batch_sizes=tuple(run.unfit),
        cost=cost,
        workload=run.stepper.workload.to_dict(),
        provenance=provenance(
            device=info.name,
            simulated=info.is_simulated,
            seed=settings.seed,
            warmup_steps=settings.warmup_steps,
            measure_steps=settings.measure_steps,
            max_steps=settings.max_steps,
            sample_rate_hz=settings.sample_rate_hz,
            host_torch_device=run.stepper.device,
            host_precision=run.stepper.precision,
            clock_snaps=run.snaps,
        ),
        sweep=sweep,
    )


def _frequencies(run: Measurer, freqs_mhz: Optional[Sequence[float]]) -> List[Optional[float]]:
    """Frequencies to sweep, ascending; read-only devices are measured at their current
    clock. Requested clocks the device lacks are snapped to its nearest steps, visibly."""
    if not run.can_control:
        if freqs_mhz:
            raise DeviceError(
                f"{run.device.name} is read-only here: cannot set --freqs-mhz "
                "(drop --read-only, run as root, or pass --allow-clock-control for nvml)"
            )
        return [None]
    available = run.device.available_freqs_mhz()
    if not freqs_mhz:
        return list(available)
    snapped = sorted({run.device.nearest_freq_mhz(f) for f in freqs_mhz})
    off = [f for f in freqs_mhz if all(abs(f - s) > 1e-3 for s in available)]
    if off:
        print(
            f"note: {run.device.name} has no step at {', '.join(f'{f:g}' for f in off)} MHz; "
            f"profiling the nearest steps {', '.join(f'{f:g}' for f in snapped)} MHz",
            file=sys.stderr,
        )
    return list(snapped)


def _fitting_batch_sizes(run: Measurer, batch_sizes: Sequence[int]) -> List[int]:
    """Batch sizes that fit, ascending; once one does not fit, larger ones are not tried."""
    fitting: List[int] = []
    for b in sorted(set(batch_sizes)):
        if run.unfit or not run.fits(b):
            run.unfit.append(b)
        else:
            fitting.append(b)
    return fitting
