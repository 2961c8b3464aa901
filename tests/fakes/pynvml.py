"""A fake `pynvml` (nvidia-ml-py) module: same names, constants and error classes as the
real one (checked against nvidia-ml-py 13.x), backed by in-memory GPUs.

Use `reset([FakeGpu(...)])`, then pass this module as `NvmlDevice(nvml=...)` or put it
in `sys.modules["pynvml"]`. Like the real library, every call before nvmlInit() raises
NVMLError_Uninitialized, and NVMLError(code) returns the subclass for that code
(NVMLError_NoPermission, NVMLError_NotSupported, ...).
"""

import string
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

NVML_FI_DEV_POWER_INSTANT = 186

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
}


class NVMLError(Exception):
    _valClassMapping: Dict[int, type] = {}

    def __new__(cls, value: int) -> "NVMLError":
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _make_error_classes() -> None:
    """NVML_ERROR_NO_PERMISSION -> NVMLError_NoPermission, as nvidia-ml-py does."""
    module = sys.modules[__name__]
    for name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        cls_name = "NVMLError_" + string.capwords(name[len("NVML_ERROR_") :], "_").replace("_", "")
        code = getattr(module, name)

        def new(cls: type, *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        cls = type(cls_name, (NVMLError,), {"__new__": new})
        setattr(module, cls_name, cls)
        NVMLError._valClassMapping[code] = cls


_make_error_classes()


def nvmlErrorString(code: int) -> str:
    return _STRINGS.get(code, "Unknown Error")


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-8f3c0d1e-0000-4000-8000-000000000001"
    mem_clocks: Tuple[int, ...] = (2619,)
    graphics_clocks: Tuple[int, ...] = (1980, 1965, 1950, 1500, 1005, 510, 345)  # descending
    idle_clock: int = 345
    memory_total: int = 85520809984
    power_mw: int = 71000  # power usage (1 s average on Ampere+)
    instant_power_mw: int = 69000
    supports_instant: bool = True
    energy_mj: Optional[int] = 123456789
    power_limit_mw: int = 700000
    power_limit_constraints_mw: Tuple[int, int] = (200000, 700000)
    compute_capability: Optional[Tuple[int, int]] = (9, 0)  # H100; None: not supported
    can_lock: bool = True  # False: NVMLError_NoPermission (not root)
    supports_lock: bool = True
    locked: Optional[Tuple[int, int]] = None
    calls: List[Tuple[str, Tuple[Any, ...]]] = field(default_factory=list)


STATE = SimpleNamespace(gpus=[FakeGpu()], initialized=0, library=True, driver="550.54.15")


def reset(gpus: Optional[List[FakeGpu]] = None, *, library: bool = True) -> List[FakeGpu]:
    STATE.gpus = list(gpus) if gpus is not None else [FakeGpu()]
    STATE.initialized = 0
    STATE.library = library
    return STATE.gpus


def _check(handle: Any = None) -> FakeGpu:
    if not STATE.initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if handle is not None and not isinstance(handle, FakeGpu):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return handle


def nvmlInit() -> None:
    if not STATE.library:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    STATE.initialized += 1


def nvmlShutdown() -> None:
    _check()
    STATE.initialized -= 1


def nvmlSystemGetDriverVersion() -> str:
    _check()
    return STATE.driver


def nvmlDeviceGetCount() -> int:
    _check()
    return len(STATE.gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> FakeGpu:
    _check()
    if not 0 <= index < len(STATE.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return STATE.gpus[index]


def nvmlDeviceGetName(handle: FakeGpu) -> str:
    return _check(handle).name


def nvmlDeviceGetUUID(handle: FakeGpu) -> str:
    return _check(handle).uuid


def nvmlDeviceGetCudaComputeCapability(handle: FakeGpu) -> Tuple[int, int]:
    gpu = _check(handle)
    if gpu.compute_capability is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu.compute_capability


def nvmlDeviceGetSupportedMemoryClocks(handle: FakeGpu) -> List[int]:
    return list(_check(handle).mem_clocks)


def nvmlDeviceGetSupportedGraphicsClocks(handle: FakeGpu, memoryClockMHz: int) -> List[int]:
    gpu = _check(handle)
    if memoryClockMHz not in gpu.mem_clocks:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return list(gpu.graphics_clocks)


def nvmlDeviceGetClockInfo(handle: FakeGpu, type: int) -> int:
    gpu = _check(handle)
    if type == NVML_CLOCK_MEM:
        return max(gpu.mem_clocks)
    return gpu.locked[0] if gpu.locked else gpu.idle_clock


def nvmlDeviceSetGpuLockedClocks(handle: FakeGpu, minGpuClockMHz: int, maxGpuClockMHz: int) -> None:
    gpu = _check(handle)
    gpu.calls.append(("nvmlDeviceSetGpuLockedClocks", (minGpuClockMHz, maxGpuClockMHz)))
    if not gpu.supports_lock:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not gpu.can_lock:
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    gpu.locked = (int(minGpuClockMHz), int(maxGpuClockMHz))


def nvmlDeviceResetGpuLockedClocks(handle: FakeGpu) -> None:
    gpu = _check(handle)
    gpu.calls.append(("nvmlDeviceResetGpuLockedClocks", ()))
    if not gpu.can_lock:
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    gpu.locked = None


def nvmlDeviceGetFieldValues(handle: FakeGpu, fieldIds: List[int]) -> List[Any]:
    gpu = _check(handle)
    out = []
    for fid in fieldIds:
        ok = fid == NVML_FI_DEV_POWER_INSTANT and gpu.supports_instant
        value = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0, usVal=0)
        if ok:
            value.uiVal = gpu.instant_power_mw
        out.append(
            SimpleNamespace(
                fieldId=fid,
                scopeId=0,
                timestamp=0,
                latencyUsec=0,
                valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                nvmlReturn=NVML_SUCCESS if ok else NVML_ERROR_NOT_SUPPORTED,
                value=value,
            )
        )
    return out


def nvmlDeviceGetPowerUsage(handle: FakeGpu) -> int:
    return _check(handle).power_mw


def nvmlDeviceGetTotalEnergyConsumption(handle: FakeGpu) -> int:
    gpu = _check(handle)
    if gpu.energy_mj is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu.energy_mj


def nvmlDeviceGetPowerManagementLimit(handle: FakeGpu) -> int:
    return _check(handle).power_limit_mw


def nvmlDeviceGetPowerManagementDefaultLimit(handle: FakeGpu) -> int:
    return _check(handle).power_limit_mw


def nvmlDeviceGetEnforcedPowerLimit(handle: FakeGpu) -> int:
    return _check(handle).power_limit_mw


def nvmlDeviceGetPowerManagementLimitConstraints(handle: FakeGpu) -> List[int]:
    return list(_check(handle).power_limit_constraints_mw)


def nvmlDeviceGetMemoryInfo(handle: FakeGpu, version: Any = None) -> Any:
    gpu = _check(handle)
    return SimpleNamespace(total=gpu.memory_total, free=gpu.memory_total, used=0)
