"""NVIDIA GPUs through NVML (nvidia-ml-py, the optional extra `undercap[nvml]`).

Only this module imports pynvml, and only when an NVML device is opened. NVML errors
become project errors with a fix (DevicePermissionError for missing root, DeviceError
otherwise), chained with `from e`.

Read-only by default: profiling then covers batch sizes at the current clock. With
`allow_clock_control` the graphics clock is locked with nvmlDeviceSetGpuLockedClocks
(min = max = f, needs root, Volta or newer) and unlocked with
nvmlDeviceResetGpuLockedClocks; a state file is written before the lock so
`undercap restore` can unlock after a crash. NVML cannot read a lock set by someone
else beforehand, so restoring means "unlocked".

Power: the field NVML_FI_DEV_POWER_INSTANT where the driver supports it, because
nvmlDeviceGetPowerUsage is a one-second average on Ampere and newer (NVML API
reference, nvmlDeviceGetPowerUsage); otherwise power usage. Energy:
nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded, Volta and newer).
"""

import contextlib
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from undercap.devices.base import Device, DeviceInfo, torch_cuda_synchronize
from undercap.devices.state import RestoresOnCrash, read_boot_id, state_dir, state_path
from undercap.errors import DeviceError, DevicePermissionError

# NVML return code name (nvml.h NVML_ERROR_*) -> what to do (module docstring).
_FIXES = {
    "NO_PERMISSION": "run as root (sudo); changing clocks needs root",
    "NOT_SUPPORTED": "this GPU or driver does not support it; leave out "
    "--allow-clock-control to profile at the current clock",
    "LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 was not found: install the NVIDIA driver",
    "DRIVER_NOT_LOADED": "the NVIDIA driver is not loaded: check `nvidia-smi`",
    "GPU_IS_LOST": "the GPU fell off the bus: check dmesg, then reset or reboot",
    "FUNCTION_NOT_FOUND": "the driver is too old for this call: update it",
    "RESET_REQUIRED": "reset the GPU (nvidia-smi -r) or reboot",
    "INSUFFICIENT_POWER": "check the GPU's power cables",
    "INVALID_ARGUMENT": "NVML rejected the value; see `nvidia-smi -q -d CLOCK`",
}


def import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as e:
        raise DeviceError(
            "the nvml backend needs nvidia-ml-py: pip install 'undercap[nvml]'"
        ) from e
    return pynvml


def nvml_error(nv: Any, e: BaseException, what: str) -> DeviceError:
    """One NVML exception -> one project error naming the failed operation and the fix."""
    code = getattr(e, "value", None)
    for name, fix in _FIXES.items():
        if code is not None and code == getattr(nv, f"NVML_ERROR_{name}", object()):
            cls = DevicePermissionError if name == "NO_PERMISSION" else DeviceError
            return cls(f"{what} failed: NVML says {e}; {fix}")
    return DeviceError(f"{what} failed: NVML error {e} (code {code})")


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


#: the member of a c_nvmlFieldValue_t's value by its valueType (nvml.h nvmlValueType_t:
#: NVML_VALUE_TYPE_DOUBLE = 0, UNSIGNED_INT, UNSIGNED_LONG, UNSIGNED_LONG_LONG,
#: SIGNED_LONG_LONG, SIGNED_INT, UNSIGNED_SHORT = 6)
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value(v: Any) -> float:
    t = v.valueType
    member = _VALUE_MEMBERS[t] if 0 <= t < len(_VALUE_MEMBERS) else "uiVal"
    return float(getattr(v.value, member))


def nvml_device_count(nvml: Any = None) -> int:
    """How many GPUs NVML sees (initialises and shuts NVML down again)."""
    nv = nvml or import_pynvml()
    try:
        nv.nvmlInit()
        try:
            return int(nv.nvmlDeviceGetCount())
        finally:
            nv.nvmlShutdown()
    except nv.NVMLError as e:
        raise nvml_error(nv, e, "NVML initialisation") from e


def _helper_here() -> bool:
    from undercap.devices.helper.client import helper_socket

    try:
        return helper_socket() is not None
    except DeviceError:
        return False


class NvmlDevice(RestoresOnCrash, Device):
    """GPU `index` as NVML numbers it. `nvml` replaces the pynvml module (tests)."""

    state_backend = "nvml"

    def __init__(
        self,
        index: int = 0,
        *,
        allow_clock_control: bool = False,
        nvml: Any = None,
        expect_uuid: Optional[str] = None,
        state_file: Optional[Union[str, Path]] = None,
        relay: Any = None,
    ) -> None:
        self._nv = nvml or import_pynvml()
        self.index, self.name = index, f"nvml:{index}"
        self.read_only = not allow_clock_control
        self.relay = relay if allow_clock_control else None  # helper/client.py
        self._open = False
        self._call(self._nv.nvmlInit, what="NVML initialisation")
        self._open = True
        try:
            count = int(self._call(self._nv.nvmlDeviceGetCount, what="counting GPUs"))
            if not 0 <= index < count:
                raise DeviceError(
                    f"{self.name} does not exist: NVML sees {count} GPU(s) (nvml:0 .. nvml:{count - 1})"
                )
            self._h = self._call(self._nv.nvmlDeviceGetHandleByIndex, index, what=self.name)
            self.uuid = _text(self._call(self._nv.nvmlDeviceGetUUID, self._h, what="GPU uuid"))
            if expect_uuid and self.uuid != expect_uuid:
                raise DeviceError(
                    f"{self.name} is now GPU {self.uuid}, not {expect_uuid} as recorded: the GPUs "
                    "were renumbered; set CUDA_DEVICE_ORDER/check `nvidia-smi -L` and retry"
                )
            self.gpu_name = _text(self._call(self._nv.nvmlDeviceGetName, self._h, what="GPU name"))
        except BaseException:
            self.close()
            raise
        self.device_key = f"nvml-{self.uuid}"
        self.state_file = Path(state_file or state_path(self.device_key, state_dir("/")))
        self._freqs: Optional[Tuple[float, ...]] = None
        self._mem_clock_mhz: Optional[int] = None
        self._power_source: Optional[str] = None  # "instant field" or "power usage (average)"
        self._energy_ok: Optional[bool] = None
        self._locked_mhz: Optional[float] = None

    def _call(self, fn: Any, *args: Any, what: str) -> Any:
        try:
            return fn(*args)
        except self._nv.NVMLError as e:
            raise nvml_error(self._nv, e, what) from e

    def _optional(self, fn_name: str, *args: Any) -> Any:
        """A query some GPUs/drivers lack: None instead of an error."""
        fn = getattr(self._nv, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._nv.NVMLError:
            return None

    # --- clocks ---------------------------------------------------------------------
    def available_freqs_mhz(self) -> Tuple[float, ...]:
        """Graphics clocks supported at the highest memory clock (the one training
        runs at), ascending."""
        if self._freqs is None:
            nv, h = self._nv, self._h
            mems = self._call(nv.nvmlDeviceGetSupportedMemoryClocks, h, what="supported clocks")
            if not mems:
                raise DeviceError(f"{self.name}: NVML lists no supported memory clocks")
            mem = self._mem_clock_mhz = int(max(mems))
            gfx = self._call(
                nv.nvmlDeviceGetSupportedGraphicsClocks, h, mem, what="supported graphics clocks"
            )
            self._freqs = tuple(sorted({float(f) for f in gfx}))
        return self._freqs

    def current_freq_mhz(self) -> float:
        nv = self._nv
        clock = self._call(nv.nvmlDeviceGetClockInfo, self._h, nv.NVML_CLOCK_GRAPHICS, what="clock")
        return float(clock)

    def set_freq_mhz(self, freq_mhz: float) -> float:
        """Lock the graphics clock. Returns the locked clock: NVML locks exactly at a
        supported clock, and the clock read back on an idle GPU need not show it (the
        read-back is kept in `last_snap` when it differs)."""
        if self.read_only:
            raise DevicePermissionError(
                f"{self.name}: clock control is off (read-only by default); pass "
                "--allow-clock-control (needs root) to lock GPU clocks"
            )
        target = self.nearest_freq_mhz(freq_mhz)
        if self.relay is not None:  # undercap-helper locks it (and unlocks on release)
            self.relay.lock(target)
            self._locked_mhz = target
        else:
            self._before_change()
            self._lock(target)
        self.note_snap(float(freq_mhz), target, self.current_freq_mhz())
        return target

    def check_control(self) -> None:
        """--allow-clock-control: refused locks are one line before any work. Locking
        needs root, and some GPUs or drivers refuse it whatever the user: resetting the
        locked clocks asks the same permission and changes nothing a run would not undo
        anyway (restoring means "unlocked")."""
        if self.read_only or self.relay is not None:
            return
        permitted, why = self._control_status()
        if not permitted:
            why = why.replace("no: ", "", 1)
            raise DevicePermissionError(f"{self.name}: cannot lock GPU clocks: {why}")
        try:
            self._nv.nvmlDeviceResetGpuLockedClocks(self._h)
        except self._nv.NVMLError as e:
            err = nvml_error(self._nv, e, f"unlocking {self.name}'s clocks (a permission check)")
            raise type(err)(
                f"{err}; or leave out --allow-clock-control to measure and train at the clocks "
                "as found"
            ) from e

    def precisions(self) -> Tuple[str, ...]:
        """From the GPU's compute capability (nvmlDeviceGetCudaComputeCapability): FP16
        at speed from 5.3, BF16 from 8.0 (Ampere); fp32 only where NVML cannot say."""
        cc = self._optional("nvmlDeviceGetCudaComputeCapability", self._h)
        if not cc:
            return ("fp32",)
        major, minor = int(cc[0]), int(cc[1])
        out = ["fp32"] + (["fp16"] if (major, minor) >= (5, 3) else [])
        return tuple(out + (["bf16"] if major >= 8 else []))

    # --- state ----------------------------------------------------------------------
    def boot_id(self) -> Optional[str]:
        return read_boot_id("/")

    def _current_state(self) -> Dict[str, Any]:
        return {"uuid": self.uuid, "index": self.index, "locked_mhz": self._locked_mhz}

    def _state_open_args(self) -> Dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid}

    def apply_state(self, state: Dict[str, Any]) -> None:
        """Lock at the saved clock, or unlock when none was locked."""
        locked = state.get("locked_mhz")
        if locked is None:
            what = f"unlocking {self.name}'s clocks"
            self._call(self._nv.nvmlDeviceResetGpuLockedClocks, self._h, what=what)
            self._locked_mhz = None
        else:
            self._lock(float(locked))

    def _lock(self, freq_mhz: float) -> None:
        """min = max = f: nvmlDeviceSetGpuLockedClocks (Volta and newer, root)."""
        mhz = int(round(freq_mhz))
        what = f"locking {self.name} at {mhz} MHz"
        self._call(self._nv.nvmlDeviceSetGpuLockedClocks, self._h, mhz, mhz, what=what)
        self._locked_mhz = freq_mhz

    # --- sensors --------------------------------------------------------------------
    def power_w(self) -> float:
        nv = self._nv
        field = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if field is not None and self._power_source != "power usage (average)":
            try:
                v = nv.nvmlDeviceGetFieldValues(self._h, [field])[0]
                if v.nvmlReturn == nv.NVML_SUCCESS:
                    self._power_source = "instant field"
                    return _field_value(v) / 1000.0  # mW
            except nv.NVMLError:
                pass
        self._power_source = "power usage (average)"
        return self._call(nv.nvmlDeviceGetPowerUsage, self._h, what="reading power") / 1000.0

    def sensor_update_interval_s(self) -> float:
        """How often NVML's power reading changes. nvmlDeviceGetPowerUsage is a 1 s
        average on Ampere and newer (NVML API reference); the instant field and older
        GPUs refresh about every 100 ms (Yang et al., "Part-time Power Measurements:
        nvidia-smi's Lack of Attention", arXiv 2312.02741)."""
        if self._power_source is None:
            with contextlib.suppress(DeviceError):
                self.power_w()  # decides which reading this GPU gives
        return 1.0 if self._power_source == "power usage (average)" else 0.1

    def energy_j(self) -> Optional[float]:
        if self._energy_ok is False:
            return None
        nv = self._nv
        try:
            mj = nv.nvmlDeviceGetTotalEnergyConsumption(self._h)
        except nv.NVMLError as e:
            unsupported = (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND)
            if getattr(e, "value", None) in unsupported:
                self._energy_ok = False
                return None
            raise nvml_error(nv, e, "reading the energy counter") from e
        self._energy_ok = True
        return float(mj) / 1000.0

    def memory_bytes(self) -> int:
        info = self._call(self._nv.nvmlDeviceGetMemoryInfo, self._h, what="memory info")
        return int(info.total)

    def synchronize(self) -> None:
        torch_cuda_synchronize()

    # --- description ----------------------------------------------------------------
    def _power_limits(self) -> Dict[str, Any]:
        """Power limits in W (mW in NVML); None where the GPU does not report them."""
        queries = {
            "power_limit_w": "nvmlDeviceGetPowerManagementLimit",
            "power_limit_default_w": "nvmlDeviceGetPowerManagementDefaultLimit",
            "power_limit_enforced_w": "nvmlDeviceGetEnforcedPowerLimit",
        }
        out: Dict[str, Any] = {}
        for key, fn in queries.items():
            mw = self._optional(fn, self._h)
            out[key] = None if mw is None else mw / 1000.0
        c = self._optional("nvmlDeviceGetPowerManagementLimitConstraints", self._h)
        out["power_limit_constraints_w"] = None if c is None else [c[0] / 1000.0, c[1] / 1000.0]
        return out

    def _control_status(self) -> Tuple[bool, str]:
        if self.read_only:
            return False, "no: read-only by default (pass --allow-clock-control, needs root" + (
                " or the undercap-helper here)" if _helper_here() else ")"
            )
        if self.relay is not None:
            return True, "yes: " + self.relay.describe()
        if hasattr(os, "geteuid") and os.geteuid() != 0:
            return False, "no: locking clocks needs root (run with sudo)"
        return True, "yes (nvmlDeviceSetGpuLockedClocks)"

    def info(self) -> DeviceInfo:
        permitted, control = self._control_status()
        try:
            freqs = self.available_freqs_mhz()
        except DeviceError as e:
            freqs, control = (), f"{control}; clock table unavailable: {e}"
        energy = self.energy_j()
        power_ok = True
        try:
            self.power_w()
        except DeviceError:
            power_ok = False
        details: Dict[str, Any] = {
            "gpu": self.gpu_name,
            "uuid": self.uuid,
            "driver": _text(self._optional("nvmlSystemGetDriverVersion") or "") or None,
            "memory_clock_mhz": self._mem_clock_mhz,
            "current_clock_mhz": self._optional(
                "nvmlDeviceGetClockInfo", self._h, self._nv.NVML_CLOCK_GRAPHICS
            ),
            "power_source": self._power_source,
            "control": control,
            "state_file": str(self.state_file),
            **self._power_limits(),
        }
        sensors = (f"board power ({self._power_source})",) if power_ok else ()
        return DeviceInfo(
            name=self.name,
            backend="nvml",
            is_simulated=False,
            freqs_mhz=freqs,
            memory_bytes=self.memory_bytes(),
            power_sensors=sensors + (("energy counter",) if energy is not None else ()),
            has_energy_counter=energy is not None,
            control_permitted=permitted,
            details=details,
        )

    def close(self) -> None:
        super().close()
        if self._open:
            self._open = False
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlShutdown()
