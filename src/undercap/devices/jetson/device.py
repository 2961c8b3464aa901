"""NVIDIA Jetson backend: GPU clocks through sysfs devfreq, power from INA3221 rails.

The sysfs root is a parameter (`--sysfs-root`, default `/`), so the backend runs on a
copied or fake tree. A frequency is locked the way NVIDIA's jetson_clocks does it:
min_freq = max_freq = f on the GPU's devfreq node, with rail-gating off so the GPU
does not power down between kernels. The original min_freq, max_freq, governor and
railgate_enable go to a state file (devices/state.py) before the first write.

Write order matters on Linux 4.9 (L4T R32), where devfreq rejects min_freq > max_freq
(_write_range); on 5.10/5.15 (L4T R35/R36) the files are PM QoS requests (devfreq.py).
Frequencies offered: the table steps the active nvpmodel mode allows (nvpmodel.py); on
5.x a lock replaces nvpmodel's own max_freq request, so that filter keeps a lock inside
the mode. Read-only mode measures (frequency, power) and never writes anything.
"""

import logging
import math
import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from undercap.devices.base import Device, DeviceInfo, torch_cuda_synchronize
from undercap.devices.jetson.devfreq import devfreq_rules, saved_limits
from undercap.devices.jetson.gpu import locate_gpu
from undercap.devices.jetson.nvpmodel import (
    ModeRange,
    NvpModel,
    Runner,
    default_nvpmodel_runner,
    describe,
    mhz,
    mode_range,
    read_nvpmodel,
)
from undercap.devices.jetson.power import PowerRails, find_rails
from undercap.devices.jetson.sysfs import (
    READ_ONLY_FIX,
    ROOT_FIX,
    DevfreqNode,
    Writer,
    board_model,
    can_write,
    kernel_release,
    l4t_release,
    mem_total_bytes,
    read_attr,
    read_int,
    read_optional,
    write_attr,
    write_with,
)
from undercap.devices.state import RestoresOnCrash, read_boot_id, state_dir, state_path
from undercap.errors import DeviceError, DevicePermissionError

log = logging.getLogger(__name__)
_AUTO: Any = object()


def _gpu_arch(node: DevfreqNode) -> Optional[str]:
    """'gm20b' from compatible 'nvidia,tegra210-gm20b', else the node-name suffix."""
    for c in node.compatible:
        tail = c.split(",")[-1].split("-")[-1]
        if re.fullmatch(r"g[a-z]\d+b", tail):
            return tail
    suffix = node.name.rsplit(".", 1)[-1]
    return suffix if suffix != "gpu" else node.of_name


class JetsonDevice(RestoresOnCrash, Device):
    """The GPU of the Jetson whose filesystem is mounted at `sysfs_root`.

    writer: called as writer(path, value) for every sysfs write (default: a plain
        write); tests pass a fake kernel that enforces devfreq's rules.
    nvpmodel_runner: runs `nvpmodel <args>` and returns stdout; default: the host's
        nvpmodel when sysfs_root is `/`, else none.
    state_file: where the original settings are recorded (default
        state_dir(sysfs_root)/state-jetson-<node>.json).
    relay: an undercap-helper relay (helper/client.py) that makes the writes; the
        process itself then writes nothing and needs no root.
    """

    state_backend = "jetson"

    def __init__(
        self,
        sysfs_root: Union[str, Path] = "/",
        *,
        read_only: bool = False,
        writer: Optional[Writer] = None,
        nvpmodel_runner: Optional[Runner] = _AUTO,
        state_file: Optional[Union[str, Path]] = None,
        relay: Any = None,
    ) -> None:
        self.root = Path(sysfs_root)
        self.read_only = read_only
        self.relay = None if read_only else relay
        self._writer = writer or write_attr
        self.node, self.wake_note = locate_gpu(
            self.root, read_only=read_only or self.relay is not None, writer=self._writer
        )
        self.name = "jetson"
        self.device_key = f"jetson-{self.node.name}"
        runner = default_nvpmodel_runner(self.root) if nvpmodel_runner is _AUTO else nvpmodel_runner
        self.nvpmodel: Optional[NvpModel] = read_nvpmodel(self.root, runner)
        self.rules = devfreq_rules(self.root)
        self._all_hz = self._read_table()
        applied = read_optional(self.node.attr("max_freq"))
        self.mode: ModeRange = mode_range(
            self.nvpmodel, self._all_hz, int(applied) if applied and applied.isdigit() else None
        )
        self.power = PowerRails(find_rails(self.root), self.root)
        self.state_file = Path(state_file or state_path(self.device_key, state_dir(self.root)))

    # --- clocks ---------------------------------------------------------------------
    def _read_table(self) -> Tuple[int, ...]:
        path = self.node.attr("available_frequencies")
        text = read_attr(path)
        try:
            table = tuple(sorted({int(x) for x in text.split()}))
        except ValueError as e:
            raise DeviceError(f"{path}: expected frequencies in Hz, read {text!r}") from e
        if not table:
            raise DeviceError(f"{path} lists no frequencies")
        return table

    def _allowed_hz(self) -> Tuple[int, ...]:
        """The table steps the nvpmodel mode allows, floor to ceiling (e.g. Nano 5W:
        up to 614.4 MHz; TX2 MAXP_CORE_ARM: up to 1134.75 MHz; nvpmodel.py)."""
        return self.mode.allowed(self._all_hz)

    def available_freqs_mhz(self) -> Tuple[float, ...]:
        return tuple(mhz(f) for f in self._allowed_hz())

    def current_freq_mhz(self) -> float:
        return mhz(read_int(self.node.attr("cur_freq")))

    def sensor_update_interval_s(self) -> float:
        """The board-power rail's INA3221 conversion time: the hwmon driver's
        `update_interval` (ms; Documentation/hwmon/ina3221.rst) where it exists, else
        the chip's power-on configuration (Device.sensor_update_interval_s)."""
        text = self.power.conversion()["update_interval"]
        try:
            ms = float(text) if text else 0.0
        except ValueError:
            ms = 0.0
        return ms / 1000.0 if ms > 0 else super().sensor_update_interval_s()

    def set_freq_mhz(self, freq_mhz: float) -> float:
        if not (isinstance(freq_mhz, (int, float)) and math.isfinite(freq_mhz) and freq_mhz > 0):
            raise DeviceError(f"{self.name}: frequency must be a positive number of MHz")
        self._require_control()
        target = min(self._allowed_hz(), key=lambda f: abs(f - freq_mhz * 1e6))
        if self.relay is not None:  # the helper writes, in the same order (helper/server.py)
            self.relay.lock(mhz(target))
        else:
            self._before_change()
            self._set_railgate("0")
            self._write_range(target, target)
        actual = read_int(self.node.attr("cur_freq"))
        self.note_snap(freq_mhz, mhz(target), mhz(actual))
        if actual != target:
            log.warning(
                "%s: locked %.1f MHz but the GPU runs at %.1f MHz (a power-mode or thermal "
                "cap snapped it)",
                self.name,
                mhz(target),
                mhz(actual),
            )
        return mhz(actual)

    def _write(self, path: Path, value: str) -> None:
        """Every write goes through here (and the injectable writer)."""
        write_with(self._writer, path, value)

    def _write_range(self, min_hz: int, max_hz: int) -> None:
        """Set [min_freq, max_freq] in an order the kernel accepts at every step.
        5.x kernels take both as requests (min > max is fine): both are written, since
        a read shows the effective range, not the request to compare with."""
        min_path, max_path = self.node.attr("min_freq"), self.node.attr("max_freq")
        if self.rules.qos:
            self._write(max_path, str(max_hz))
            self._write(min_path, str(min_hz))
            return
        cur_min, cur_max = read_int(min_path), read_int(max_path)
        if cur_min <= max_hz:  # raising max first keeps min <= max at every step
            steps = [(max_path, max_hz, cur_max), (min_path, min_hz, cur_min)]
        else:  # the new max is below the current min: lower min first
            steps = [(min_path, min_hz, cur_min), (max_path, max_hz, cur_max)]
        for path, value, current in steps:
            if value != current:
                self._write(path, str(value))

    def _set_railgate(self, value: str) -> None:
        path = self.node.railgate_path
        if path is not None and read_optional(path) != value:
            self._write(path, value)

    def check_control(self) -> None:
        """Clock control asked for (not --read-only): the devfreq limits must be
        writable, said before any work (base.Device.check_control)."""
        if not self.read_only:
            self._require_control()

    def _require_control(self) -> None:
        if self.read_only:
            raise DevicePermissionError(
                f"{self.name} is in read-only mode: GPU clocks are not changed; drop "
                "--read-only to lock frequencies"
            )
        if self.relay is not None:
            return
        for attr in ("min_freq", "max_freq"):
            path = self.node.attr(attr)
            if not can_write(path):
                raise DevicePermissionError(
                    f"cannot change GPU clocks: {path} is writable by root only; "
                    f"{ROOT_FIX} {READ_ONLY_FIX}"
                )

    # --- state ----------------------------------------------------------------------
    def boot_id(self) -> Optional[str]:
        return read_boot_id(self.root)

    def _current_state(self) -> Dict[str, Any]:
        effective = (read_int(self.node.attr("min_freq")), read_int(self.node.attr("max_freq")))
        known = self.nvpmodel is not None and self.nvpmodel.conf_path is not None
        return {
            "devfreq_node": self.node.name,
            **saved_limits(self.rules, self._all_hz, effective, self.mode, known),
            "governor": read_optional(self.node.attr("governor")),
            "railgate_enable": read_optional(self.node.railgate_path),
        }

    def restore_hint(self) -> str:
        root = "" if self.root == Path("/") else f" --sysfs-root {self.root}"
        return f"undercap restore --device jetson{root}"

    def _state_open_args(self) -> Dict[str, Any]:
        return {"sysfs_root": str(self.root.resolve())}

    def apply_state(self, state: Dict[str, Any]) -> None:
        """Write saved settings back (only those that differ), in a valid order."""
        if state.get("devfreq_node") != self.node.name:
            raise DeviceError(
                f"saved state is for GPU node {state.get('devfreq_node')!r}, but this board's "
                f"GPU is {self.node.name!r}: wrong --sysfs-root or state file?"
            )
        if state.get("pm_qos") and "max_request_hz" in state:  # 5.x: the requests
            self._write_range(int(state["min_request_hz"]), int(state["max_request_hz"]))
        else:  # 4.9 (or a state file from before requests were saved): the values
            self._write_range(int(state["min_freq_hz"]), int(state["max_freq_hz"]))
        governor = state.get("governor")
        gov_path = self.node.attr("governor")
        if governor and read_optional(gov_path) not in (None, governor):
            self._write(gov_path, str(governor))
        if state.get("railgate_enable") is not None:
            self._set_railgate(str(state["railgate_enable"]))

    def precisions(self) -> Tuple[str, ...]:
        """By GPU: Maxwell gm20b (5.3), Pascal gp10b (6.2) and Volta gv11b (7.2) run
        FP16 at speed; Ampere ga10b (8.7) also BF16 (compute capabilities: CUDA C
        Programming Guide, Jetson boards)."""
        arch = _gpu_arch(self.node) or ""
        return ("fp32", "fp16", "bf16") if arch.startswith("ga") else ("fp32", "fp16")

    # --- sensors --------------------------------------------------------------------
    def power_w(self) -> float:
        return self.power.board_power_w()

    def memory_bytes(self) -> int:
        return mem_total_bytes(self.root)

    def synchronize(self) -> None:
        torch_cuda_synchronize()

    # --- description ----------------------------------------------------------------
    def _control_status(self) -> Tuple[bool, str]:
        if self.read_only:
            return False, "no: read-only mode"
        if self.relay is not None:
            return True, "yes: " + self.relay.describe()
        paths = [self.node.attr("min_freq"), self.node.attr("max_freq")]
        blocked = [str(p) for p in paths if not can_write(p)]
        if blocked:
            return False, f"no: {blocked[0]} is writable by root only (run as root)"
        return True, "yes: writes the devfreq files itself (root)"

    def info(self) -> DeviceInfo:
        permitted, control = self._control_status()
        try:
            memory = self.memory_bytes()
        except DeviceError:
            memory = 0
        node = self.node
        details: Dict[str, Any] = {
            "board": board_model(self.root),
            "l4t": l4t_release(self.root),
            "gpu": _gpu_arch(node),
            "devfreq_node": node.name,
            "devfreq_path": str(node.path),
            "governor": read_optional(node.attr("governor")),
            "available_governors": (read_optional(node.attr("available_governors")) or "").split(),
            **{
                f"{f}_mhz": mhz(int(read_optional(node.attr(f)) or 0))
                for f in ("cur_freq", "min_freq", "max_freq")
            },
            "all_freqs_mhz": [mhz(f) for f in self._all_hz],
            "railgate_enable": read_optional(node.railgate_path),
            "nvpmodel": describe(self.nvpmodel, self.mode),
            "mode_floor_mhz": mhz(self.mode.floor_hz),
            "mode_ceiling_mhz": mhz(self.mode.ceiling_hz),
            "kernel": kernel_release(self.root),
            "devfreq_limits": self.rules.label,
            "gpu_woken": self.wake_note,
            "power": self.power.describe(),
            "control": control,
            "state_file": str(self.state_file),
            "sysfs_root": str(self.root),
        }
        return DeviceInfo(
            name=self.name,
            backend="jetson",
            is_simulated=False,
            freqs_mhz=self.available_freqs_mhz(),
            memory_bytes=memory,
            power_sensors=self.power.labels,
            has_energy_counter=False,
            control_permitted=permitted,
            details=details,
        )
