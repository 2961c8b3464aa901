"""A simulated Jetson: analytic DVFS, roofline timing and board power on a virtual clock.

SIMULATED HARDWARE, standing in for devices we do not have; every DeviceInfo it returns
says so (`is_simulated`, backend "simulated", details["simulated"]). Training on it is
real (torch runs on the host); the device's clock, power and energy come from the
physical model in `model.py`, whose constants live in `specs/<name>.toml` with the
source or reasoning of each one (docs/concepts/simulated.md).

Time: `account_step(workload, b)` advances a virtual clock by the modelled t(b, f) * b
and records the span; consecutive identical steps share one span (start, step time,
count), so a long run keeps a handful of spans. Power: noisy readings of the board input
rail at any virtual time; like the real boards' INA3221 monitors there is no energy
counter. Clocks: the devfreq governor's choice until `set_freq_mhz` locks a table step.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from undercap.artifacts.workload import Workload
from undercap.devices.base import Device, DeviceInfo
from undercap.devices.simulated.model import (
    SimSpec,
    StepModel,
    eval_pass_s,
    gaussian_noise,
    load_spec,
    ripple_amplitude_w,
    step_model,
)
from undercap.errors import DeviceError, DeviceOutOfMemoryError, DevicePermissionError

SPEC_DIR = Path(__file__).with_name("specs")


def known_names() -> List[str]:
    """Names of the bundled spec files (without the `sim:` prefix)."""
    return sorted(p.stem for p in SPEC_DIR.glob("*.toml"))


@dataclass
class _Span:
    """`count` consecutive identical steps starting at `start_s`."""

    start_s: float
    step_s: float
    count: int
    mean_w: float
    ripple_w: float
    key: Tuple[Any, ...]

    @property
    def end_s(self) -> float:
        return self.start_s + self.count * self.step_s


class SimulatedDevice(Device):
    """A Jetson-class GPU simulated from a spec file (see module docstring)."""

    is_simulated = True

    def __init__(self, spec: SimSpec, *, seed: int = 0, read_only: bool = False) -> None:
        self.spec = spec
        self.name = f"sim:{spec.name}"
        self.seed = int(seed)
        self.read_only = bool(read_only)
        self._locked_mhz: Optional[float] = None
        self._now_s = 0.0
        self._spans: List[_Span] = []
        self._arrays: Optional[Tuple[np.ndarray, ...]] = None  # cache for vector reads
        self._steps: Dict[Tuple[Any, ...], StepModel] = {}  # account_step's step models

    @classmethod
    def from_name(cls, name: str, seed: int = 0, *, read_only: bool = False) -> "SimulatedDevice":
        """`jetson-nano`, `jetson-tx2nx`, `jetson-orin-nano` (a `sim:` prefix is
        accepted), or the path of a spec file of the same format."""
        bare = name[4:] if name.startswith("sim:") else name
        path = SPEC_DIR / f"{bare}.toml"
        if not path.is_file() and bare.endswith(".toml") and Path(bare).is_file():
            path = Path(bare)
        if not path.is_file():
            known = ", ".join(f"sim:{n}" for n in known_names())
            raise DeviceError(f"unknown simulated device {name!r}; known: {known}")
        return cls(load_spec(path), seed=seed, read_only=read_only)

    # --- clocks ---------------------------------------------------------------------
    def available_freqs_mhz(self) -> Tuple[float, ...]:
        return self.spec.freqs_mhz

    def current_freq_mhz(self) -> float:
        # Unlocked, the devfreq governor (nvhost_podgov) ramps to the top step under
        # sustained training load; that is the clock the model charges.
        return self.spec.fmax_mhz if self._locked_mhz is None else self._locked_mhz

    def set_freq_mhz(self, freq_mhz: float) -> float:
        self._check_writable()
        if not (isinstance(freq_mhz, (int, float)) and math.isfinite(freq_mhz) and freq_mhz > 0):
            raise DeviceError(f"{self.name}: frequency must be a positive number of MHz")
        self._locked_mhz = self.nearest_freq_mhz(float(freq_mhz))
        self.note_snap(float(freq_mhz), self._locked_mhz, self._locked_mhz)  # visible snap
        return self._locked_mhz

    def save_state(self) -> Dict[str, Any]:
        return {"device": self.name, "locked_freq_mhz": self._locked_mhz}

    def restore_state(self, state: Dict[str, Any]) -> None:
        locked = state.get("locked_freq_mhz")
        target = None if locked is None else float(locked)
        if target == self._locked_mhz:
            return
        self._check_writable()
        if target is not None and target not in self.spec.freqs_mhz:
            raise DeviceError(f"{self.name}: saved frequency {target} MHz is not a table step")
        self._locked_mhz = target

    def _check_writable(self) -> None:
        if self.read_only:
            raise DevicePermissionError(
                f"{self.name} was opened read-only; open it without --read-only to change clocks"
            )

    # --- model ----------------------------------------------------------------------
    def precisions(self) -> Tuple[str, ...]:
        return self.spec.precision_names

    def model_step(self, workload: Workload, batch_size: int, freq_mhz: float) -> StepModel:
        """Noise-free time and mean power of one step at (batch_size, freq_mhz)."""
        return step_model(self.spec, workload, batch_size, freq_mhz)

    def eval_time_s(self, workload: Workload, n_items: int, batch_size: int) -> float:
        """Seconds an evaluation pass of `n_items` would take at the current clock (the
        model's forward-only steps: model.eval_pass_s); the clock does not move."""
        return eval_pass_s(self.spec, workload, n_items, batch_size, self.current_freq_mhz())

    def memory_bytes(self) -> int:
        return self.spec.memory_usable_bytes

    def check_fits(self, workload: Workload, batch_size: int) -> None:
        m = self.model_step(workload, batch_size, self.current_freq_mhz())
        if not m.fits:
            raise DeviceOutOfMemoryError(self._oom_message(workload, m))

    def _oom_message(self, workload: Workload, m: StepModel) -> str:
        fits, b = None, 1  # the largest power of two that fits
        while b <= 1 << 20 and self.model_step(workload, b, self.spec.fmax_mhz).fits:
            fits, b = b, b * 2
        hint = f"at most {fits} fits" if fits else "not even batch size 1 fits"
        return (
            f"{self.name}: batch size {m.batch_size} of {workload.model} needs "
            f"{m.memory_bytes_needed / 1e9:.2f} GB but only "
            f"{self.spec.memory_usable_bytes / 1e9:.2f} GB of device memory is usable; "
            f"use a smaller batch size ({hint})"
        )

    # --- virtual time -----------------------------------------------------------------
    def now_s(self) -> float:
        return self._now_s

    def account_step(self, workload: Workload, batch_size: int) -> None:
        """Charge one training step at the current clock: advance the virtual clock by
        its modelled time and record the span for power readings."""
        key = (workload, batch_size, self.current_freq_mhz())
        m = self._steps.get(key)
        if m is None:  # the model is a pure function of the key: computed once per key
            m = self._steps[key] = self.model_step(*key)
        if not m.fits:
            raise DeviceOutOfMemoryError(self._oom_message(workload, m))
        last = self._spans[-1] if self._spans else None
        if last is not None and last.key == key and last.end_s == self._now_s:
            last.count += 1
        else:
            ripple = ripple_amplitude_w(self.spec, m)
            self._spans.append(_Span(self._now_s, m.step_time_s, 1, m.power_w, ripple, key))
        self._now_s = self._spans[-1].end_s
        self._arrays = None

    def wait_s(self, seconds: float) -> None:
        """Let `seconds` of virtual time pass with the GPU idle (e.g. evaluation on
        the host, or waiting between measurements)."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise DeviceError(f"{self.name}: idle time must be a non-negative number")
        self._now_s += seconds

    # --- power ----------------------------------------------------------------------
    def power_w(self) -> float:
        return self.power_at_w(self._now_s)

    def energy_j(self) -> Optional[float]:
        return None  # INA3221 boards have no energy counter; the sampler integrates

    def sensor_update_interval_s(self) -> float:
        """The modelled INA3221 conversion window (spec `sensor.window_s`): each reading
        averages the rail over it, so readings closer together are not independent."""
        return self.spec.sensor_window_s or super().sensor_update_interval_s()

    def power_at_w(self, t_s: float) -> float:
        """A sensor reading at virtual time `t_s` (idle power where no step ran)."""
        return float(self.power_readings_w([t_s])[0])

    def power_readings_w(self, times_s: Union[Sequence[float], np.ndarray]) -> np.ndarray:
        """Readings at many virtual times at once. Each reading is the noise-free
        power at that time, plus the step ripple, plus Gaussian sensor noise that
        depends only on (seed, time), so readings are reproducible."""
        t = np.asarray(times_s, dtype=np.float64)
        mean, ripple, phase = self._true_power_w(t)
        sigma = self.spec.noise_floor_w + self.spec.noise_frac * mean
        wave = ripple * np.sin(2.0 * np.pi * phase)
        return mean + wave + sigma * gaussian_noise(self.seed, t)

    def _true_power_w(self, t: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mean power, ripple amplitude and step phase at each time. A span covers
        (start, end]: a reading right at the end of a step still sees that step."""
        mean = np.full(t.shape, self.spec.idle_board_w)
        ripple, phase = np.zeros(t.shape), np.zeros(t.shape)
        if not self._spans:
            return mean, ripple, phase
        if self._arrays is None:  # cached until the next step
            rows = [(x.start_s, x.step_s, x.end_s, x.mean_w, x.ripple_w) for x in self._spans]
            self._arrays = tuple(np.array(rows).T)
        starts, steps, ends, means, ripples = self._arrays
        idx = np.searchsorted(starts, t, side="left") - 1
        valid = idx >= 0
        safe = np.where(valid, idx, 0)
        inside = valid & (t <= ends[safe])
        i = safe[inside]
        mean[inside] = means[i]
        ripple[inside] = ripples[i]
        phase[inside] = np.mod((t[inside] - starts[i]) / steps[i], 1.0)
        return mean, ripple, phase

    def busy_energy_j(self, t0_s: float, t1_s: float) -> float:
        """Exact noise-free energy drawn between two virtual times (ripple and noise
        average out over whole steps). For checking the sampler, not for results."""
        energy, covered = 0.0, 0.0
        for sp in self._spans:
            lo, hi = max(t0_s, sp.start_s), min(t1_s, sp.end_s)
            if hi > lo:
                energy += sp.mean_w * (hi - lo)
                covered += hi - lo
        return energy + self.spec.idle_board_w * max(0.0, (t1_s - t0_s) - covered)

    # --- description ------------------------------------------------------------------
    def info(self) -> DeviceInfo:
        spec = self.spec
        return DeviceInfo(
            name=self.name,
            backend="simulated",
            is_simulated=True,
            freqs_mhz=spec.freqs_mhz,
            memory_bytes=spec.memory_usable_bytes,
            power_sensors=spec.power_sensors,
            has_energy_counter=False,
            control_permitted=not self.read_only,
            details={
                "simulated": True,
                "note": (
                    "SIMULATED device: clocks, time, power and energy come from an analytic "
                    f"model ({spec.description}), not from hardware"
                ),
                "spec_file": str(Path(spec.path).name),
                "spec_sources": list(spec.sources),
                "power_reading": f"{spec.power_sensors[0]} (board input rail)",
                "power_modes_w": list(spec.power_modes_w),
                "memory_total_bytes": spec.memory_total_bytes,
                "seed": self.seed,
            },
        )
