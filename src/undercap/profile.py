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

from undercap.artifacts import Profile, ProfileRow
from undercap.devices.base import Device, controlled
from undercap.errors import DeviceError, DeviceOutOfMemoryError, UndercapError
from undercap.power import PowerSampler
from undercap.provenance import provenance
from undercap.workload import Workload

DEFAULT_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class ProfileSettings:
    warmup_steps: int = 2
    measure_steps: int = 5
    sample_rate_hz: float = 200.0
    seed: int = 0
    #: Simulated devices only: run one real step per batch size on the host to
    #: prove the model builds, fits and trains. False skips host compute; the
    #: device model still gives every t and P. Used to profile many models cheaply
    #: (e.g. for the baselines' safe frequency).
    host_steps: bool = True


class _Stepper:
    """Runs real training steps of one model on the host accelerator."""

    def __init__(
        self,
        model_name: str,
        input_shape: tuple[int, ...],
        num_classes: int,
        torch_device: str,
        seed: int,
    ) -> None:
        import torch

        from undercap.models import build_model, optimizer_for, workload_of

        torch.manual_seed(seed)
        self.torch = torch
        self.device = torch_device
        self.model = build_model(model_name, num_classes=num_classes, input_shape=input_shape)
        self.workload: Workload = workload_of(self.model, model_name, input_shape)
        self.model.to(torch_device).train()
        opt = torch.optim.AdamW if optimizer_for(model_name) == "adamw" else torch.optim.Adam
        self.optimizer = opt(self.model.parameters(), lr=1e-4)
        self.input_shape = input_shape
        self.num_classes = num_classes
        self.is_text = len(input_shape) == 1
        self._batch: tuple | None = None

    def set_batch_size(self, b: int) -> None:
        torch = self.torch
        if self.is_text:  # token ids in, next-token ids out
            x = torch.randint(0, self.num_classes, (b, *self.input_shape))
            y = torch.randint(0, self.num_classes, (b, *self.input_shape))
        else:
            x = torch.randn(b, *self.input_shape)
            y = torch.randint(0, self.num_classes, (b,))
        self._batch = (x.to(self.device), y.to(self.device))

    def step(self) -> None:
        from undercap.loop import loss_and_correct

        x, y = self._batch  # type: ignore[misc]
        self.optimizer.zero_grad(set_to_none=True)
        loss, _, _ = loss_and_correct(self.model(x), y)
        loss.backward()
        self.optimizer.step()

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def is_oom(self, e: BaseException) -> bool:
        oom = getattr(self.torch.cuda, "OutOfMemoryError", ())
        return isinstance(e, oom) or "out of memory" in str(e).lower()


class _Run:
    """State of one profiling session: measures configurations, records rows/cost."""

    def __init__(
        self, device: Device, stepper: _Stepper, settings: ProfileSettings, tick: Callable[[], None]
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

    def measure(self, b: int, freq_mhz: float | None) -> ProfileRow:
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
) -> list[tuple[int, float | None]]:
    """The full sweep's configurations in measuring order."""
    return [(b, f) for b in sorted(batch_sizes) for f in (sorted(freqs_mhz) or [None])]


def run_profile(
    device: Device,
    model_name: str,
    input_shape: Sequence[int],
    batch_sizes: Sequence[int] | None = None,
    *,
    num_classes: int = 10,
    power_limit_w: float | None = None,
    efficient: bool | None = None,
    freqs_mhz: Sequence[float] | None = None,
    settings: ProfileSettings | None = None,
    torch_device: str = "auto",
    progress: bool = True,
) -> Profile:
    """Profile `model_name` on `device`. With a power limit the efficient sweep is
    used unless `efficient=False`. Read-only devices are measured at their current
    clock only."""
    settings = settings or ProfileSettings()
    shape = tuple(int(x) for x in input_shape)
    from undercap.pretrain import resolve_torch_device

    wall0 = time.monotonic()
    stepper = _Stepper(
        model_name, shape, num_classes, resolve_torch_device(torch_device), settings.seed
    )
    bar = _progress_bar(progress, device.name, model_name)
    run = _Run(device, stepper, settings, tick=bar.update)
    freqs = _frequencies(run, freqs_mhz)
    efficient = bool(power_limit_w is not None) if efficient is None else efficient
    if efficient and power_limit_w is None:
        raise UndercapError("the efficient sweep needs --power-limit")
    energy0, dev_t0 = device.energy_j(), device.now_s()
    with PowerSampler(device, rate_hz=settings.sample_rate_hz) as whole, controlled(device):
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
    info = device.info()
    energy1 = device.energy_j()
    cost_energy = (
        whole.stats().energy_j if energy0 is None or energy1 is None else energy1 - energy0
    )
    return Profile(
        device=info.to_dict(),
        model=model_name,
        input_shape=shape,
        rows=tuple(sorted(run.rows, key=lambda r: (r.batch_size, r.freq_mhz))),
        simulated=info.is_simulated,
        mode="efficient" if efficient else ("read-only" if not run.can_control else "full"),
        power_limit_w=power_limit_w,
        unfit_batch_sizes=tuple(run.unfit),
        cost={
            "device_time_s": device.now_s() - dev_t0,
            "energy_j": cost_energy,
            "wall_s": time.monotonic() - wall0,
            "configurations": len(run.rows),
            "steps": run.steps,
        },
        workload=stepper.workload.to_dict(),
        provenance=provenance(
            device=info.name,
            simulated=info.is_simulated,
            seed=settings.seed,
            warmup_steps=settings.warmup_steps,
            measure_steps=settings.measure_steps,
            sample_rate_hz=settings.sample_rate_hz,
            host_torch_device=stepper.device,
            clock_snaps=run.snaps,
        ),
    )


def _frequencies(run: _Run, freqs_mhz: Sequence[float] | None) -> list[float | None]:
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
    run: _Run, batch_sizes: list[int], freqs: list[float | None], power_limit_w: float
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


class _NoBar:
    total: int | None = None

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(enabled: bool, device_name: str, model_name: str):  # type: ignore[no-untyped-def]
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(desc=f"profile {model_name} on {device_name}", unit="cfg", leave=False)
