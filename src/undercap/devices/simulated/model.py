"""The physics behind the simulated Jetson devices: spec files, step time and power.

Everything here is a pure function of a device spec (devices/simulated/specs/*.toml, one
per device, every constant there carries its source or reasoning) and a Workload (real
FLOP and byte counts of the model). No torch. The model in prose, each board's constants
and how far they are from measured boards: docs/concepts/simulated.md.

Time of one training step at batch size b and GPU clock f (a roofline with fixed
per-step costs, Williams et al., CACM 2009 "Roofline"):

    peak_flops(f)   = cores * k_p * f        (k_p FLOPs per core per cycle: 2 for FP32,
                                              one FMA; a 16-bit precision's from the spec)
    occupancy(b)    = b*p / (b*p + cores*h)  (p: parallel elements per kernel and sample;
                                              h: half-saturation elements per core)
    t_compute       = b*flops_per_sample / (peak_flops(f) * compute_efficiency * occupancy(b))
    t_traffic       = (b*traffic_per_sample + 3*param_bytes) / (bandwidth * efficiency)
    t_optimizer     = optimizer_bytes_per_step / (bandwidth * efficiency)
    t_kernels       = max(t_compute, t_traffic) + t_optimizer
    t_step          = t_kernels + kernels_per_step * launch_s + host_overhead_s

Weights are read in forward and backward and gradients written once per step (3 x param
bytes), and Adam's update is a separate memory-bound pass: both cost the same per step
whatever b is. Occupancy saturates in b (a Michaelis-Menten form, the shape of throughput
against parallelism under a fixed latency, Little's law). Mixed precision (fp16, bf16)
takes the spec's rate and efficiency for it, a workload counted under autocast, and the
power FP32 draws at that clock. An evaluation pass is forward-only steps: a third of a
training step's FLOPs, activation traffic and kernel launches (the backward pass costs
about twice the forward: Kaplan et al. 2020, "Scaling laws", Sec. 2.1), eval_pass_s.

Board input power while stepping (what POM_5V_IN / VDD_IN reads):

    P = idle_board + host_active + leakage(V) + dynamic + dram
    V(f)      piecewise-linear DVFS curve from the spec (flat at Vmin, then rising)
    leakage   = gpu_leakage_w_at_vmax * (V / Vmax)^2   (GPU rail is power-gated at idle)
    dynamic   = C_eff * V^2 * f * activity
    activity  = (1 - a) * occupancy * t_compute / t_step + a * t_kernels / t_step
                (a: clock-tree share, toggling whenever a kernel runs; the rest is the
                 SM datapath, active in proportion to occupied SMs * busy time)
    dram      = dram_active_w * t_kernels / t_step + e_byte * bytes_per_step / t_step

C_eff * V^2 * f * occupancy * t_compute is independent of occupancy (energy per FLOP is
fixed by V, idle SMs are clock-gated): a fuller GPU draws more power for a shorter time,
so larger b raises power at a given f, and a small batch can run at a higher clock under
the same power limit (paper Fig. 1). Readings add what a real INA3221 shows: a per-step
ripple (ripple_amplitude_w) and Gaussian noise, a deterministic hash of (seed, time).
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple, Union

import numpy as np

from undercap.artifacts.io import read_toml
from undercap.artifacts.workload import Workload
from undercap.errors import DeviceError

#: bytes per activation element: fp32, else a 16-bit float (autocast)
BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class SimSpec:
    """One simulated device, as read from its spec file (units in the names)."""

    name: str
    description: str
    sources: Tuple[str, ...]
    path: str
    freqs_mhz: Tuple[float, ...]
    cores: int
    compute_efficiency: float
    half_saturation_elements_per_core: float
    kernel_launch_s: float
    host_overhead_s: float
    voltage_mhz: Tuple[float, ...]
    voltage_v: Tuple[float, ...]
    idle_board_w: float
    host_active_w: float
    gpu_leakage_w_at_vmax: float
    c_eff_f: float
    clock_tree_fraction: float
    dram_active_w: float
    dram_energy_j_per_byte: float
    power_sensors: Tuple[str, ...]
    power_modes_w: Tuple[float, ...]
    memory_total_bytes: int
    memory_usable_bytes: int
    workspace_bytes: int
    bandwidth_bytes_per_s: float
    bandwidth_efficiency: float
    noise_floor_w: float
    noise_frac: float
    ripple_frac: float
    sensor_window_s: float
    #: 16-bit precisions the GPU runs: name -> (FLOPs per core per cycle, efficiency)
    precisions: Tuple[Tuple[str, float, float], ...] = ()

    @property
    def fmax_mhz(self) -> float:
        return self.freqs_mhz[-1]

    @property
    def precision_names(self) -> Tuple[str, ...]:
        return ("fp32",) + tuple(p for p, _, _ in self.precisions)

    def rate(self, precision: str) -> Tuple[float, float]:
        """(FLOPs per core per cycle, compute efficiency) in `precision`."""
        if precision == "fp32":
            return 2.0, self.compute_efficiency
        for name, flops, efficiency in self.precisions:
            if name == precision:
                return flops, efficiency
        raise DeviceError(
            f"the simulated {self.name} has no {precision}; it runs "
            f"{', '.join(self.precision_names)}"
        )


@dataclass(frozen=True)
class StepModel:
    """Modelled cost of one training step (noise-free)."""

    batch_size: int
    freq_mhz: float
    step_time_s: float
    time_per_sample_s: float
    power_w: float  # mean board power while stepping
    fits: bool
    memory_bytes_needed: float
    compute_time_s: float
    memory_time_s: float
    occupancy: float
    voltage_v: float


# --- spec files ------------------------------------------------------------------
def load_spec(path: Union[str, Path]) -> SimSpec:
    """Read and validate a spec file; problems raise DeviceError naming the key."""
    path = Path(path)
    raw = read_toml(path, "device spec", DeviceError)
    get = _Getter(raw, path)
    freqs = tuple(sorted(f / 1e6 for f in get.floats("gpu.freqs_hz")))
    vf, vv = get.floats("voltage.freq_mhz"), get.floats("voltage.volts")
    if len(vf) != len(vv) or list(vf) != sorted(vf):
        raise DeviceError(f"device spec {path}: voltage.freq_mhz must be ascending, one per volt")
    return SimSpec(
        name=get.str("name"),
        description=get.str("description"),
        sources=tuple(get.strs("sources")),
        path=str(path),
        freqs_mhz=freqs,
        cores=int(get.num("gpu.cores")),
        compute_efficiency=get.num("gpu.compute_efficiency"),
        half_saturation_elements_per_core=get.num("gpu.half_saturation_elements_per_core"),
        kernel_launch_s=get.num("gpu.kernel_launch_s"),
        host_overhead_s=get.num("gpu.host_overhead_s", allow_zero=True),
        voltage_mhz=vf,
        voltage_v=vv,
        idle_board_w=get.num("power.idle_board_w"),
        host_active_w=get.num("power.host_active_w", allow_zero=True),
        gpu_leakage_w_at_vmax=get.num("power.gpu_leakage_w_at_vmax", allow_zero=True),
        c_eff_f=get.num("power.c_eff_f"),
        clock_tree_fraction=get.num("power.clock_tree_fraction", allow_zero=True),
        dram_active_w=get.num("power.dram_active_w", allow_zero=True),
        dram_energy_j_per_byte=get.num("power.dram_energy_j_per_byte", allow_zero=True),
        power_sensors=tuple(get.strs("power.sensors")),
        power_modes_w=get.floats("power.modes_w"),
        memory_total_bytes=int(get.num("memory.total_bytes")),
        memory_usable_bytes=int(get.num("memory.usable_bytes")),
        workspace_bytes=int(get.num("memory.workspace_bytes", allow_zero=True)),
        bandwidth_bytes_per_s=get.num("memory.bandwidth_bytes_per_s"),
        bandwidth_efficiency=get.num("memory.bandwidth_efficiency"),
        noise_floor_w=get.num("sensor.noise_floor_w", allow_zero=True),
        noise_frac=get.num("sensor.noise_frac", allow_zero=True),
        ripple_frac=get.num("sensor.ripple_frac", allow_zero=True),
        sensor_window_s=get.num("sensor.window_s", allow_zero=True),
        precisions=_precisions(get, raw),
    )


def _precisions(get: "_Getter", raw: Dict[str, Any]) -> Tuple[Tuple[str, float, float], ...]:
    """[precision.<name>] tables: the 16-bit precisions the board runs, in a fixed order."""
    for name in sorted(set(raw.get("precision") or {}) - {"fp16", "bf16"}):
        raise DeviceError(f"device spec {get.path}: unknown precision {name!r}")
    rate = [(p, f"precision.{p}.") for p in ("fp16", "bf16") if p in (raw.get("precision") or {})]
    keys = ("flops_per_core_cycle", "compute_efficiency")
    return tuple((p, *(get.num(at + k) for k in keys)) for p, at in rate)  # type: ignore[misc]


class _Getter:
    def __init__(self, raw: Dict[str, Any], path: Path) -> None:
        self.raw, self.path = raw, path

    def _get(self, key: str) -> Any:
        node: Any = self.raw
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise DeviceError(f"device spec {self.path}: missing key {key!r}")
            node = node[part]
        return node

    def _bad(self, key: str, what: str) -> DeviceError:
        return DeviceError(f"device spec {self.path}: {key} must be {what}")

    def str(self, key: str) -> str:
        v = self._get(key)
        if not isinstance(v, str):
            raise self._bad(key, "a string")
        return v

    def strs(self, key: str) -> List[str]:
        v = self._get(key)
        if not isinstance(v, list) or not v or not all(isinstance(s, str) for s in v):
            raise self._bad(key, "a non-empty list of strings")
        return v

    def num(self, key: str, *, allow_zero: bool = False) -> float:
        v = self._get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or v < 0 or (v == 0 and not allow_zero):
            raise self._bad(key, "a non-negative number" if allow_zero else "a positive number")
        return float(v)

    def floats(self, key: str) -> Tuple[float, ...]:
        v = self._get(key)
        ok = isinstance(v, list) and bool(v)
        if not ok or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in v
        ):
            raise self._bad(key, "a non-empty list of positive numbers")
        return tuple(float(x) for x in v)


# --- the model -------------------------------------------------------------------
def voltage_v(spec: SimSpec, freq_mhz: float) -> float:
    """GPU rail voltage at `freq_mhz` (piecewise-linear DVFS table, clamped at the ends)."""
    return float(np.interp(freq_mhz, spec.voltage_mhz, spec.voltage_v))


def peak_flops(spec: SimSpec, freq_mhz: float, precision: str = "fp32") -> float:
    """Peak FLOP rate in `precision`: FP32 is one fused multiply-add (2 FLOPs) per CUDA
    core per cycle; a 16-bit precision's rate is the spec's."""
    return spec.cores * spec.rate(precision)[0] * freq_mhz * 1e6


def _effective_flops(spec: SimSpec, freq_mhz: float, precision: str) -> float:
    return peak_flops(spec, freq_mhz, precision) * spec.rate(precision)[1]


def occupancy(spec: SimSpec, workload: Workload, batch_size: int) -> float:
    """Fraction of the GPU's throughput a step can use at this batch size, in (0, 1)."""
    per_sample = workload.activation_bytes_per_sample / BYTES_PER_ELEMENT[workload.precision]
    per_kernel = per_sample / max(1, workload.kernels_per_step)
    work = batch_size * per_kernel
    half = spec.cores * spec.half_saturation_elements_per_core
    return work / (work + half) if work > 0 else 1e-9


def gpu_power_parts_w(spec: SimSpec, freq_mhz: float) -> Tuple[float, float]:
    """(leakage, dynamic power at full activity) of the GPU rail at `freq_mhz`, in W:
    gpu_leakage_w_at_vmax * (V / Vmax)^2 and C_eff * V^2 * f. Their sum is the most the
    simulated GPU can draw at that clock (the readings check in benchmarks/ bounds
    measured rails with it)."""
    v = voltage_v(spec, freq_mhz)
    vmax = voltage_v(spec, spec.fmax_mhz)
    return spec.gpu_leakage_w_at_vmax * (v / vmax) ** 2, spec.c_eff_f * v * v * freq_mhz * 1e6


def step_model(spec: SimSpec, workload: Workload, batch_size: int, freq_mhz: float) -> StepModel:
    """Time and mean board power of one training step at (batch_size, freq_mhz)."""
    if batch_size < 1:
        raise DeviceError(f"batch size must be at least 1, got {batch_size}")
    if not (math.isfinite(freq_mhz) and freq_mhz > 0):
        raise DeviceError(f"frequency must be a positive number of MHz, got {freq_mhz}")
    b = batch_size
    occ = occupancy(spec, workload, b)
    bandwidth = spec.bandwidth_bytes_per_s * spec.bandwidth_efficiency
    t_compute = (
        b * workload.flops_per_sample / (_effective_flops(spec, freq_mhz, workload.precision) * occ)
    )
    traffic = b * workload.traffic_bytes_per_sample + 3.0 * workload.param_bytes
    t_traffic = traffic / bandwidth
    t_opt = workload.optimizer_bytes_per_step / bandwidth
    t_kernels = max(t_compute, t_traffic) + t_opt
    t_step = t_kernels + workload.kernels_per_step * spec.kernel_launch_s + spec.host_overhead_s

    a = spec.clock_tree_fraction
    activity = (1 - a) * occ * t_compute / t_step + a * t_kernels / t_step
    leakage, dynamic_full = gpu_power_parts_w(spec, freq_mhz)
    dynamic = dynamic_full * activity
    bytes_per_step = traffic + workload.optimizer_bytes_per_step
    dram = spec.dram_active_w * t_kernels / t_step
    dram += spec.dram_energy_j_per_byte * bytes_per_step / t_step
    power = spec.idle_board_w + spec.host_active_w + leakage + dynamic + dram

    needed = workload.training_memory_bytes(b) + spec.workspace_bytes  # + cuDNN's workspace
    return StepModel(
        batch_size=b,
        freq_mhz=float(freq_mhz),
        step_time_s=t_step,
        time_per_sample_s=t_step / b,
        power_w=power,
        fits=needed <= spec.memory_usable_bytes,
        memory_bytes_needed=needed,
        compute_time_s=t_compute,
        memory_time_s=t_traffic + t_opt,
        occupancy=occ,
        voltage_v=voltage_v(spec, freq_mhz),
    )


#: a forward pass's share of a training step's FLOPs, traffic and kernels (module docstring)
FORWARD_SHARE = 1.0 / 3.0


def eval_pass_s(
    spec: SimSpec, workload: Workload, n_items: int, batch_size: int, freq_mhz: float
) -> float:
    """Seconds an evaluation of `n_items` in batches of `batch_size` takes at `freq_mhz`:
    forward-only steps (module docstring), each batch's own occupancy."""
    bandwidth = spec.bandwidth_bytes_per_s * spec.bandwidth_efficiency
    total, left = 0.0, int(n_items)
    while left > 0:
        b = min(left, int(batch_size))
        occ = occupancy(spec, workload, b)
        flops = FORWARD_SHARE * b * workload.flops_per_sample
        t_compute = flops / (_effective_flops(spec, freq_mhz, workload.precision) * occ)
        traffic = FORWARD_SHARE * b * workload.traffic_bytes_per_sample + workload.param_bytes
        launches = math.ceil(FORWARD_SHARE * workload.kernels_per_step)
        total += max(t_compute, traffic / bandwidth) + launches * spec.kernel_launch_s
        total += spec.host_overhead_s
        left -= b
    return total


# --- sensor readings ---------------------------------------------------------------
def ripple_amplitude_w(spec: SimSpec, model: StepModel) -> float:
    """Amplitude of the per-step power ripple (ripple_frac of the above-idle power) as
    the sensor sees it: a sine of period T averaged over the sensor window w keeps
    |sinc(pi w / T)| of its amplitude, so ripple from very short steps is smoothed away."""
    above_idle = max(0.0, model.power_w - spec.idle_board_w)
    x = math.pi * spec.sensor_window_s / model.step_time_s
    attenuation = 1.0 if x == 0 else abs(math.sin(x) / x)
    return spec.ripple_frac * above_idle * attenuation


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele et al., OOPSLA 2014): a well-mixed 64-bit hash."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
    return x ^ (x >> np.uint64(31))


def gaussian_noise(seed: int, times_s: np.ndarray) -> np.ndarray:
    """Standard normal values that depend only on (seed, time), via Box-Muller on
    two hashes of the time in nanoseconds. Reproducible in any order and batch."""
    t_ns = np.round(np.asarray(times_s, dtype=np.float64) * 1e9).astype(np.int64)
    key = np.uint64(_splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0])
    h1 = _splitmix64(t_ns.view(np.uint64) ^ key)
    h2 = _splitmix64(h1)
    scale = 1.0 / float(1 << 53)
    u1 = ((h1 >> np.uint64(11)).astype(np.float64) + 0.5) * scale
    u2 = (h2 >> np.uint64(11)).astype(np.float64) * scale
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
