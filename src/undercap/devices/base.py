"""The device interface every backend implements, and safe frequency control.

A device is one GPU we can (maybe) clock and whose power we can read. Backends:
simulated (analytic model), jetson (sysfs devfreq + INA3221), nvml (NVIDIA GPUs).
Only backend modules import vendor libraries; everything else sees this interface.

Frequency changes always go through `controlled(device)` or `locked(device, f)`,
which save the original settings first and put them back on every exit path:
normal exit, exceptions, Ctrl-C (SIGINT) and SIGTERM. SIGKILL and power loss cannot
be caught; for those, backends that change real hardware also write the saved state
to a state file that `undercap restore` replays.
"""

import contextlib
import signal
import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from undercap import defaults
from undercap.artifacts.workload import Workload
from undercap.errors import DeviceError, DevicePermissionError


@dataclass(frozen=True)
class DeviceInfo:
    """What `undercap devices` shows and what every profile records."""

    name: str
    backend: str  # "simulated", "jetson" or "nvml"
    is_simulated: bool
    freqs_mhz: Tuple[float, ...]
    memory_bytes: int
    power_sensors: Tuple[str, ...]  # named rails / sensors, e.g. ("POM_5V_IN", "POM_5V_GPU")
    has_energy_counter: bool
    control_permitted: bool  # may we change clocks (root, not read-only)?
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        return dict(d, freqs_mhz=list(self.freqs_mhz), power_sensors=list(self.power_sensors))


class Device(ABC):
    """One GPU device. Frequencies in MHz, power in W, energy in J, time in s."""

    name: str
    is_simulated: bool = False
    #: True when the device must not be changed (no clock or power-limit writes).
    read_only: bool = False

    # --- clocks -----------------------------------------------------------------
    @abstractmethod
    def available_freqs_mhz(self) -> Tuple[float, ...]:
        """The discrete GPU frequencies the device supports, ascending."""

    @abstractmethod
    def current_freq_mhz(self) -> float:
        """The GPU frequency right now (read back from the hardware)."""

    @abstractmethod
    def set_freq_mhz(self, freq_mhz: float) -> float:
        """Lock the GPU at `freq_mhz`; returns the frequency actually read back
        (hardware may snap to a neighbouring step). Raises DevicePermissionError
        in read-only mode. Call it inside `controlled()` so it is undone."""

    def precisions(self) -> Tuple[str, ...]:
        """The arithmetic this GPU trains in at speed: "fp32", and the 16-bit floats of
        mixed precision it has hardware for ("fp16": FP16x2 or Tensor Cores, compute
        capability 5.3 and later; "bf16": Ampere, 8.0 and later)."""
        return ("fp32",)

    @abstractmethod
    def save_state(self) -> Dict[str, Any]:
        """The settings `set_freq_mhz` may change, as a JSON-able dict."""

    @abstractmethod
    def restore_state(self, state: Dict[str, Any]) -> None:
        """Put back settings saved by `save_state`."""

    # --- sensors ----------------------------------------------------------------
    @abstractmethod
    def power_w(self) -> float:
        """Instantaneous power reading (board power where the device has it)."""

    def energy_j(self) -> Optional[float]:
        """Cumulative energy counter in J where the hardware has one, else None."""
        return None

    def sensor_update_interval_s(self) -> float:
        """Seconds between fresh readings of the power sensor: faster readings repeat (or
        average over) the same conversion, so profiles and the power guard judge windows
        of several updates (`power_window_s`). Default: the INA3221's power-on setting."""
        return INA3221_DEFAULT_UPDATE_S

    @abstractmethod
    def memory_bytes(self) -> int:
        """Memory the GPU can use for training."""

    # --- time and work ------------------------------------------------------------
    def now_s(self) -> float:
        """The device's clock. Wall clock for real devices; virtual for simulated."""
        return time.monotonic()

    def wait_s(self, seconds: float) -> None:
        """Let `seconds` pass with the GPU idle (training paused for lack of power).
        Real devices sleep; a simulated device advances its virtual clock."""
        time.sleep(max(0.0, seconds))

    def synchronize(self) -> None:
        """Wait until queued GPU work is done, so timestamps bracket real work."""

    def account_step(self, workload: Workload, batch_size: int) -> None:
        """Called after each real training step. Real devices did the work already;
        a simulated device advances its virtual clock by t(b, f) * b here and raises
        DeviceOutOfMemoryError if the batch would not fit."""

    def check_fits(self, workload: Workload, batch_size: int) -> None:
        """Raise DeviceOutOfMemoryError if training at `batch_size` cannot fit.
        Real devices find out by trying; the default accepts."""

    @abstractmethod
    def info(self) -> DeviceInfo:
        """Capabilities, for `undercap devices` and provenance."""

    def check_control(self) -> None:
        """Unless read-only, raise DevicePermissionError now, before any work, if this
        process may not change the clocks: one line that says how to get control or to go
        read-only. Backends whose permission shows only when they try (NVML) try
        something harmless here."""
        if self.read_only:
            return
        info = self.info()
        if not info.control_permitted:
            why = str(info.details.get("control") or "no permission").replace("no: ", "", 1)
            raise DevicePermissionError(
                f"{self.name}: cannot change GPU clocks ({why}); run as root, or pass "
                "--read-only to measure and train at the clocks as found"
            )

    def close(self) -> None:
        """Release handles (NVML shutdown etc.)."""

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- helpers ----------------------------------------------------------------
    def nearest_freq_mhz(self, freq_mhz: float) -> float:
        """The supported step closest to `freq_mhz`."""
        freqs = self.available_freqs_mhz()
        if not freqs:
            raise DeviceError(f"{self.name}: no available frequencies")
        return min(freqs, key=lambda f: abs(f - freq_mhz))

    #: the latest `set_freq_mhz` that did not run at the requested clock, else None:
    #: {"requested_mhz", "step_mhz" (the table step locked), "actual_mhz" (read back)}
    last_snap: Optional[Dict[str, float]] = None

    def note_snap(self, requested_mhz: float, step_mhz: float, actual_mhz: float) -> None:
        """Record what `set_freq_mhz` did (backends call it after every lock). A request
        the device has no step for is snapped to the nearest step, visibly: one line on
        stderr and `last_snap` (training results report it). A read-back that differs
        from the step (a power-mode or thermal cap) is recorded here too; backends
        decide whether to warn, since an idle GPU may read back a lower clock."""
        off_table = abs(requested_mhz - step_mhz) > SNAP_TOLERANCE_MHZ
        if not off_table and abs(actual_mhz - step_mhz) <= SNAP_TOLERANCE_MHZ:
            self.last_snap = None
            return
        self.last_snap = {
            "requested_mhz": float(requested_mhz),
            "step_mhz": float(step_mhz),
            "actual_mhz": float(actual_mhz),
        }
        if off_table:
            print(
                f"note: {self.name} has no {requested_mhz:g} MHz step; locked the nearest "
                f"step, {step_mhz:g} MHz",
                file=sys.stderr,
                flush=True,
            )


#: TI INA3221 data sheet (SBOS576), CONFIG register reset value 7127h: three channels,
#: 1 sample averaged, 1.1 ms bus and 1.1 ms shunt conversion; the Linux driver's
#: update_interval = channels x samples x (bus + shunt conversion time)
#: (Documentation/hwmon/ina3221.rst) = 3 x 1 x 2.2 ms.
INA3221_DEFAULT_UPDATE_S = 0.0066
#: requested and locked clocks closer than this are the same step (float round-off,
#: Hz <-> MHz conversions)
SNAP_TOLERANCE_MHZ = 1e-3


def power_window_s(device: Device) -> float:
    """The power window the guard judges and a profile measures several of: the robust
    peak's window (devices/sampler.py), widened to hold SENSOR_UPDATES_PER_WINDOW fresh
    sensor readings where the sensor updates slowly (a 1 s NVML average: 2 s)."""
    try:
        update = float(device.sensor_update_interval_s())
    except Exception:  # a backend that cannot say: the data-sheet default
        update = INA3221_DEFAULT_UPDATE_S
    if not (update > 0 and update < float("inf")):
        update = INA3221_DEFAULT_UPDATE_S
    return max(defaults.PEAK_WINDOW_S, defaults.SENSOR_UPDATES_PER_WINDOW * update)


def torch_cuda_synchronize() -> None:
    """Wait for queued CUDA work, if this process already uses torch with CUDA.
    Never imports torch (device modules must not)."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        cuda.synchronize()


class _TerminatedError(SystemExit):
    """Raised in the main thread on SIGTERM so `finally` blocks restore the device."""


@contextlib.contextmanager
def handling_signals(sigs: List[int], handler: Any) -> Iterator[None]:
    """`handler` for `sigs` while the block runs. Signal handlers can only be
    installed from the main thread; elsewhere the caller's handlers stay."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def _raise_terminated(signum: int, _frame: object) -> None:
    """SIGTERM (and SIGHUP) as an exception: Python runs `finally` on exceptions and on
    KeyboardInterrupt (SIGINT), but the default SIGTERM action kills without unwinding."""
    raise _TerminatedError(128 + signum)


_TERMINATING = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


@contextlib.contextmanager
def controlled(device: Device) -> Iterator[Device]:
    """Allow clock changes inside the block; restore the original settings on exit:
    normal exit, exceptions, Ctrl-C and SIGTERM. A second signal during restoration is
    deferred until restoration finished."""
    state = device.save_state()
    try:
        with handling_signals(_TERMINATING, _raise_terminated):
            yield device
    finally:
        pending: List[int] = []
        with handling_signals([signal.SIGINT, signal.SIGTERM], lambda n, _f: pending.append(n)):
            device.restore_state(state)
        if pending:  # re-deliver what arrived while we were restoring
            if pending[0] == signal.SIGINT:
                raise KeyboardInterrupt
            raise _TerminatedError(128 + pending[0])


@contextlib.contextmanager
def locked(device: Device, freq_mhz: float) -> Iterator[float]:
    """Lock the GPU at `freq_mhz` for the block; yields the frequency read back."""
    with controlled(device):
        yield device.set_freq_mhz(freq_mhz)
