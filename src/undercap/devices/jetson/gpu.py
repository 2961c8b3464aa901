"""Find the GPU undercap can clock on a Jetson, including JetPack 6's late GPU.

On L4T R36 nvgpu registers the GPU with devfreq only once it has powered up
(gk20a_scale_init runs at the first power-on). NVIDIA's jetson_clocks (R36, do_igpu)
writes 0 to the GPU's railgate_enable, looks again and puts railgate_enable back;
undercap does the same when it may write, and otherwise says in one line what to run.
"""

import time
from pathlib import Path
from typing import Callable, Optional, Tuple

from undercap.devices.jetson.sysfs import (
    DevfreqNode,
    JetsonUnavailable,
    Writer,
    can_write,
    find_gpu_devfreq,
    find_gpu_device,
    read_attr,
    read_dt_strings,
    thor_node,
    write_with,
)
from undercap.errors import DeviceError

#: how long to wait for the devfreq node after powering the GPU up (jetson_clocks
#: looks once, right after the write: registration happens inside it)
WAKE_WAIT_S = 1.0
_POLL_S = 0.05


def _not_ready_error(device: Path, read_only: bool) -> JetsonUnavailable:
    compat = "/".join(read_dt_strings(device / "of_node" / "compatible")) or "a Jetson GPU"
    why = (
        "read-only mode never writes railgate_enable"
        if read_only
        else f"{device / 'railgate_enable'} is writable by root only"
    )
    return JetsonUnavailable(
        f"the GPU at {device} ({compat}) has not registered with devfreq yet (JetPack 6 "
        f"does so when the GPU first powers up) and {why}; run "
        '`sudo "$(command -v undercap)" devices` '
        "once (it powers the GPU up briefly, as jetson_clocks does) or any CUDA program, "
        "then try again"
    )


def locate_gpu(
    root: Path, *, read_only: bool, writer: Writer, sleep: Callable[[float], None] = time.sleep
) -> Tuple[DevfreqNode, Optional[str]]:
    """The GPU's devfreq node, and a note when undercap had to power the GPU up to
    make it appear. Raises JetsonUnavailable (Thor, or not ready and may not write)
    or DeviceError (no Jetson GPU at all)."""
    node = find_gpu_devfreq(root)
    if node is not None:
        return node, None
    thor = thor_node(root)
    if thor is not None:
        raise JetsonUnavailable(
            f"Jetson Thor (JetPack 7: GPU devfreq domain {thor.name}, no INA3221 rails) "
            "is not supported by undercap's jetson backend; use a simulated device (sim:...) "
            "to plan, or nvml:<index> if NVML reports this GPU"
        )
    device = find_gpu_device(root)
    if device is None:
        raise DeviceError(
            f"no Jetson GPU under {root / 'sys/class/devfreq'} or {root / 'sys/devices'} "
            "(looked for the devfreq nodes 57000000.gpu, 17000000.gp10b, 17000000.gv11b, "
            "17000000.ga10b, 17000000.gpu and a gpu.0 device); on a copied tree pass "
            "--sysfs-root <folder containing sys/>"
        )
    railgate = device / "railgate_enable"
    if read_only or not can_write(railgate):
        raise _not_ready_error(device, read_only)
    original, node = _wake(root, railgate, writer, sleep)
    if node is None:
        raise DeviceError(
            f"the GPU at {device} registered no devfreq node even when powered up "
            f"(railgate_enable 0): GPU frequency scaling is not available on this kernel"
        )
    note = (
        f"GPU devfreq node {node.name} appeared once undercap powered the GPU up "
        f"(railgate_enable 0, then {original} again)"
    )
    return node, note


def _wake(
    root: Path, railgate: Path, writer: Writer, sleep: Callable[[float], None]
) -> Tuple[str, Optional[DevfreqNode]]:
    """Power the GPU up (railgate_enable 0), look for its devfreq node, and put
    railgate_enable back on every path (the node stays registered)."""
    original = read_attr(railgate)
    node = None
    try:
        if original != "0":
            write_with(writer, railgate, "0")
        waited = 0.0
        node = find_gpu_devfreq(root)
        while node is None and waited < WAKE_WAIT_S:
            sleep(_POLL_S)
            waited += _POLL_S
            node = find_gpu_devfreq(root)
    finally:
        if original != "0" and read_attr(railgate) != original:
            write_with(writer, railgate, original)
    return original, node
