"""Measure the lookup table t(b, f), P(b, f) on a device (paper Section 4.1).

For every configuration we lock the frequency, run a few warm-up mini-batches of the
real model (excluded: first-iteration allocation, cuDNN autotuning, DVFS settling),
synchronise, then time `measure_steps` mini-batches while sampling power. Time per
sample is data-independent, so inputs are random tensors of the model's shape.

Two sweeps:
* full: every batch size x every frequency;
* efficient (power limit known, Sec. 4.1): start from the largest batch at the
  lowest frequency and raise f until the limit is exceeded; then take the next
  smaller batch starting from the last feasible frequency (a smaller batch draws
  less power at the same f, so every lower f is feasible for it too and need not
  be measured). This skips most infeasible and dominated configurations.

On a simulated device the virtual clock and modelled power give t and P; the host
still runs one real training step per batch size (the model must build, fit and
train), and the device accounts every configuration's steps. On real hardware every
configuration runs the real model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from undercap import defaults
from undercap.artifacts.profile import Profile, ProfileRow
from undercap.artifacts.provenance import provenance
from undercap.devices.base import Device, controlled
from undercap.devices.sampler import PowerSampler
from undercap.errors import DeviceError, DeviceOutOfMemoryError, UndercapError
from undercap.profile.stepper import Stepper
from undercap.report.progress import bar as progress_bar

DEFAULT_BATCH_SIZES = defaults.PROFILE_BATCH_SIZES


@dataclass(frozen=True)
class ProfileSettings:
    warmup_steps: int = defaults.PROFILE_WARMUP_STEPS
    measure_steps: int = defaults.PROFILE_MEASURE_STEPS
    sample_rate_hz: float = defaults.PROFILE_SAMPLE_RATE_HZ
    seed: int = 0
    #: Simulated devices only: run one real step per batch size on the host to
    #: prove the model builds, fits and trains. False skips host compute; the
    #: device model still gives every t and P. Used to profile many models cheaply
    #: (e.g. for the baselines' safe frequency).
    host_steps: bool = True


class _Run:
    """State of one profiling session: measures configurations, records rows/cost."""

    def __init__(
        self, device: Device, stepper: Stepper, settings: ProfileSettings, tick: Callable[[], None]
    ) -> None:
        self.device, self.stepper, self.settings, self.tick = device, stepper, settings, tick
        self.rows: list[ProfileRow] = []
        self.unfit: list[int] = []
        self.steps = 0
        self.snaps: list[dict[str, float]] = []  # configurations whose clock read back differently
        self.can_control = not device.read_only and device.info().control_permitted
        self.host_steps = settings.host_steps or not device.is_simulated

    def _host_step(self, b: int) -> None:
        # Simulated devices: the host already ran one real step per batch size in
        # fits(); host speed does not enter the virtual clock, which charges here.
        if not self.device.is_simulated:
            self.stepper.step()
        self.device.account_step(self.stepper.workload, b)
        self.steps += 1

    def fits(self, b: int) -> bool:
        try:
            self.device.check_fits(self.stepper.workload, b)
            if self.host_steps:  # a real step proves it builds and fits on the host
                self.stepper.set_batch_size(b)
                self.stepper.step()
                self.stepper.synchronize()
        except DeviceOutOfMemoryError:
            return False
        except RuntimeError as e:
            if self.stepper.is_oom(e):
                return False
            raise
        return True

    def measure(self, b: int, freq_mhz: Optional[float]) -> ProfileRow:
        dev, s = self.device, self.settings
        if freq_mhz is None:  # read-only: measure at whatever clock the device runs
            step = dev.current_freq_mhz()
        else:
            # Rows are keyed by the requested step: a throttled board can read back
            # the same clock for two steps, which would make duplicate rows.
            step, read_back = freq_mhz, dev.set_freq_mhz(freq_mhz)
            if abs(read_back - freq_mhz) > 1e-6:
                self.snaps.append(
                    {"batch_size": b, "freq_mhz": freq_mhz, "read_back_mhz": read_back}
                )
        if not dev.is_simulated:
            self.stepper.set_batch_size(b)
        for _ in range(s.warmup_steps):
            self._host_step(b)
        self.stepper.synchronize()
        dev.synchronize()
        with PowerSampler(dev, rate_hz=s.sample_rate_hz) as sampler:
            t0 = dev.now_s()
            for _ in range(s.measure_steps):
                self._host_step(b)
            self.stepper.synchronize()
            dev.synchronize()
            t1 = dev.now_s()
        stats = sampler.stats()
        row = ProfileRow(
            batch_size=b,
            freq_mhz=float(step),
            time_per_sample_s=(t1 - t0) / (s.measure_steps * b),
            peak_power_w=stats.peak_w,
            mean_power_w=stats.mean_w,
        )
        self.rows.append(row)
        self.tick()
        return row


def sweep_plan(
    batch_sizes: Sequence[int], freqs_mhz: Sequence[float]
) -> list[tuple[int, Optional[float]]]:
    """The full sweep's configurations in measuring order."""
    return [(b, f) for b in sorted(batch_sizes) for f in (sorted(freqs_mhz) or [None])]


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
) -> Profile:
    """Profile `model_name` on `device`. With a power limit the efficient sweep is
    used unless `efficient=False`. Read-only devices are measured at their current
    clock only. `task` ("classification" or "next-token") tells a user's model's
    inputs apart (built-in models know theirs)."""
    from undercap.train.loop import resolve_torch_device

    settings = settings or ProfileSettings()
    shape = tuple(int(x) for x in input_shape)
    efficient = bool(power_limit_w is not None) if efficient is None else efficient
    if efficient and power_limit_w is None:
        raise UndercapError("the efficient sweep needs --power-limit")
    wall0 = time.monotonic()
    stepper = Stepper(
        model_name, shape, num_classes, resolve_torch_device(torch_device), settings.seed, task
    )
    bar = progress_bar(progress, desc=f"profile {model_name} on {device.name}", unit="cfg")
    run = _Run(device, stepper, settings, tick=bar.update)
    energy0, dev_t0 = device.energy_j(), device.now_s()
    with PowerSampler(device, rate_hz=settings.sample_rate_hz) as whole, controlled(device):
        freqs = _frequencies(run, freqs_mhz)
        fitting = _fitting_batch_sizes(run, batch_sizes or DEFAULT_BATCH_SIZES)
        bar.total = len(fitting) * len(freqs) if not efficient else None
        if efficient:
            _efficient_sweep(run, fitting, freqs, power_limit_w)  # type: ignore[arg-type]
        else:
            for b, f in sweep_plan(fitting, freqs):
                run.measure(b, f)
    bar.close()
    if not run.rows:
        raise UndercapError(
            f"no batch size fits {model_name} on {device.name}; try smaller --batch-sizes"
        )
    energy1 = device.energy_j()
    cost = {
        "device_time_s": device.now_s() - dev_t0,
        "energy_j": whole.stats().energy_j
        if energy0 is None or energy1 is None
        else energy1 - energy0,
        "wall_s": time.monotonic() - wall0,
        "configurations": len(run.rows),
        "steps": run.steps,
    }
    mode = "efficient" if efficient else ("read-only" if not run.can_control else "full")
    return _artifact(run, model_name, shape, mode, power_limit_w, cost)


def _artifact(
    run: _Run,
    model_name: str,
    shape: tuple[int, ...],
    mode: str,
    power_limit_w: Optional[float],
    cost: dict[str, Any],
) -> Profile:
    info, settings = run.device.info(), run.settings
    return Profile(
        device=info.to_dict(),
        model=model_name,
        input_shape=shape,
        rows=tuple(sorted(run.rows, key=lambda r: (r.batch_size, r.freq_mhz))),
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
            sample_rate_hz=settings.sample_rate_hz,
            host_torch_device=run.stepper.device,
            clock_snaps=run.snaps,
        ),
    )


def _frequencies(run: _Run, freqs_mhz: Optional[Sequence[float]]) -> list[Optional[float]]:
    """Frequencies to sweep; read-only devices are measured at their current clock."""
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
    return sorted({run.device.nearest_freq_mhz(f) for f in freqs_mhz})


def _fitting_batch_sizes(run: _Run, batch_sizes: Sequence[int]) -> list[int]:
    """Batch sizes that fit, ascending; once one does not fit, larger ones are not tried."""
    fitting: list[int] = []
    for b in sorted(set(batch_sizes)):
        if run.unfit or not run.fits(b):
            run.unfit.append(b)
        else:
            fitting.append(b)
    return fitting


def _efficient_sweep(
    run: _Run, batch_sizes: list[int], freqs: list[Optional[float]], power_limit_w: float
) -> None:
    """Paper Sec. 4.1: largest batch first, raise f until infeasible, then the next
    smaller batch from the last feasible f."""
    start = 0
    for b in sorted(batch_sizes, reverse=True):
        last_feasible = None
        for i in range(start, len(freqs)):
            row = run.measure(b, freqs[i])
            if row.peak_power_w > power_limit_w:
                break
            last_feasible = i
        start = last_feasible if last_feasible is not None else start
