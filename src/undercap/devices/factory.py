"""The one map from names to backends: open a device by name, discover the devices
present, and reopen one from a crash state file to restore it.

Names: `sim:jetson-nano`, `sim:jetson-tx2nx`, `sim:jetson-orin-nano`,
`sim:jetson-xavier-nx` (or `sim:` + a spec file path), `trace:<file.csv>` (measured
(b, f) configurations replayed, devices/trace.py), `jetson` (sysfs at `sysfs_root`),
`nvml:<index>`. Backends are imported when first needed, so listing devices and
selecting configurations never import torch or vendor libraries they do not use.
"""

from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

from undercap.devices.base import Device, DeviceInfo
from undercap.devices.state import SavedState, list_states, read_state, remove_state, state_dir
from undercap.errors import DeviceError

SPEC_DIR = Path(__file__).with_name("simulated") / "specs"


def simulated_names() -> List[str]:
    """Names of the bundled simulated devices (one spec file each)."""
    return sorted(f"sim:{p.stem}" for p in SPEC_DIR.glob("*.toml"))


def _nvml_index(name: str) -> int:
    index = name[5:]
    if not index.isdigit():
        raise DeviceError(f"bad device {name!r}: use nvml:<index>, e.g. nvml:0")
    return int(index)


def open_device(
    name: str,
    *,
    sysfs_root: Union[str, Path] = "/",
    read_only: bool = False,
    allow_clock_control: bool = False,
    seed: int = 0,
    check_control: bool = True,
    helper: Optional[str] = None,
) -> Device:
    """Open a device by name. Unknown names raise DeviceError listing the valid ones.
    `seed` seeds a simulated device's sensor noise; NVML stays read-only unless
    `allow_clock_control` (and not `read_only`). Where clock control is asked for (not
    read-only), a process that may not change the clocks gets DevicePermissionError
    here, before any work (`check_control=False`: only describe the device). Clock
    control goes through an undercap-helper where one serves the device (`helper`: its
    socket; else $UNDERCAP_HELPER, else the default path where it exists)."""
    if name.startswith("sim:"):
        from undercap.devices.simulated import SimulatedDevice

        device: Device = SimulatedDevice.from_name(name[4:], seed=seed, read_only=read_only)
    elif name.startswith("trace:"):
        from undercap.devices.trace import TraceDevice, read_trace

        device = TraceDevice(read_trace(name[6:]), seed=seed, read_only=read_only)
    elif name == "jetson":
        from undercap.devices.jetson import JetsonDevice

        relay = None if read_only else _relay(name, helper)
        device = JetsonDevice(sysfs_root=sysfs_root, read_only=read_only, relay=relay)
    elif name.startswith("nvml:"):
        from undercap.devices.nvml import NvmlDevice

        control = allow_clock_control and not read_only
        index = _nvml_index(name)
        relay = _relay(name, helper) if control else None
        device = NvmlDevice(index, allow_clock_control=control, relay=relay)
    else:
        valid = ", ".join([*simulated_names(), "trace:<file.csv>", "jetson", "nvml:<index>"])
        raise DeviceError(f"unknown device {name!r}; known devices: {valid}")
    if check_control:
        try:
            device.check_control()
        except BaseException:
            device.close()
            raise
    return device


def _relay(name: str, helper: Optional[str]) -> Any:
    from undercap.devices.helper.client import Relay

    return Relay.open(name, helper)


# --- discovery ----------------------------------------------------------------------
def discover(
    sysfs_root: Optional[str] = None, nvml: Optional[bool] = None, helper: Optional[str] = None
) -> Tuple[List[DeviceInfo], List[str]]:
    """Every device undercap can use here, and notes on what was not found.

    sysfs_root: a Jetson's filesystem root; when given it must hold a Jetson GPU.
    nvml: True requires NVML, False skips it, None lists NVML GPUs if present.
    helper: the undercap-helper socket a Jetson's clock control would go through."""
    notes: List[str] = []
    infos = [_info(name) for name in simulated_names()]
    infos += _jetson_infos(sysfs_root, notes, helper)
    if nvml is not False:
        infos += _nvml_infos(required=bool(nvml), notes=notes)
    return infos, notes


def _info(name: str, **kwargs: Any) -> DeviceInfo:
    with open_device(name, check_control=False, **kwargs) as dev:
        return dev.info()


def _jetson_infos(
    sysfs_root: Optional[str], notes: List[str], helper: Optional[str] = None
) -> List[DeviceInfo]:
    from undercap.devices.jetson.sysfs import JetsonUnavailable, jetson_present

    root = Path(sysfs_root or "/")
    if jetson_present(root):
        try:
            return [_info("jetson", sysfs_root=root, helper=helper)]
        except JetsonUnavailable as e:  # Thor, or a GPU not yet registered: say why
            notes.append(f"jetson: {e}")
            return []
        except DeviceError as e:  # a helper that refuses: the board is there all the same
            notes.append(f"jetson: no clock control through the helper ({e})")
            return [_info("jetson", sysfs_root=root, read_only=True)]
    where = root / "sys/class/devfreq"
    if sysfs_root is not None:  # the user pointed at a tree: it must be a Jetson's
        raise DeviceError(
            f"no Jetson GPU devfreq node under {where}: --sysfs-root must be the folder "
            "that holds a Jetson's sys/ (and proc/, etc/)"
        )
    notes.append(f"jetson: none found (no GPU devfreq node under {where})")
    return []


def _nvml_infos(*, required: bool, notes: List[str]) -> List[DeviceInfo]:
    from undercap.devices.nvml import nvml_device_count

    try:
        count = nvml_device_count()
    except DeviceError as e:
        if required:
            raise
        notes.append(f"nvml: not available ({e})")
        return []
    if count == 0:
        notes.append("nvml: no NVIDIA GPU")
    return [_info(f"nvml:{i}") for i in range(count)]


# --- restoring after a crash ----------------------------------------------------------
def reopen(saved: SavedState, **backend_kwargs: Any) -> Any:
    """The device a state file names, opened so that `apply_state` may write
    (jetson: its sysfs root; nvml: its index, checked against the recorded uuid).
    `backend_kwargs` reach the constructor (tests pass a fake kernel or NVML)."""
    if saved.backend == "jetson":
        from undercap.devices.jetson import JetsonDevice

        root = backend_kwargs.pop("sysfs_root", saved.open_args.get("sysfs_root", "/"))
        return JetsonDevice(root, state_file=saved.path, **backend_kwargs)
    if saved.backend == "nvml":
        from undercap.devices.nvml import NvmlDevice

        return NvmlDevice(
            int(saved.open_args.get("index", 0)),
            allow_clock_control=True,
            expect_uuid=saved.open_args.get("uuid"),
            state_file=saved.path,
            **backend_kwargs,
        )
    raise DeviceError(f"{saved.path}: unknown backend {saved.backend!r} in state file")


def replay(path: Union[str, Path], *, force: bool = False, **backend_kwargs: Any) -> str:
    """Put back the settings recorded in a state file, then remove it; returns a
    one-line summary. Refuses while the process that wrote the file still runs (it
    restores on exit) unless `force`. A file from an earlier boot is removed without
    writing anything: the reboot reset those settings."""
    saved = read_state(path)
    if saved.owner_running() and not force:
        raise DeviceError(
            f"process {saved.pid} that changed {saved.device_key} is still running and "
            "restores the settings itself when it exits; stop it, or pass --force"
        )
    device = reopen(saved, **backend_kwargs)
    try:
        if saved.from_other_boot(device.boot_id()):
            remove_state(saved.path)
            return (
                f"{saved.device_key}: the board rebooted since {saved.created_utc}, which "
                f"reset these settings; removed stale {saved.path}"
            )
        device.apply_state(saved.state)
    finally:
        device.close()
    remove_state(saved.path)
    return f"{saved.device_key}: restored the settings saved at {saved.created_utc} ({saved.path})"


def state_files(device: Optional[str] = None, sysfs_root: Union[str, Path] = "/") -> List[Path]:
    """The state files `undercap restore` should replay: every one in the state folder,
    or the one of `device` (jetson, nvml:<index>; simulated and trace devices change
    nothing)."""
    if device is None:
        return list_states(state_dir(sysfs_root))
    if device.startswith(("sim:", "trace:")):
        return []
    if device == "jetson":
        from undercap.devices.jetson import JetsonDevice

        with JetsonDevice(sysfs_root, nvpmodel_runner=None) as dev:
            return [dev.state_file]
    if device.startswith("nvml:"):
        from undercap.devices.nvml import NvmlDevice

        with NvmlDevice(_nvml_index(device)) as dev:
            return [dev.state_file]
    raise DeviceError(f"unknown device {device!r}: use jetson or nvml:<index>")
