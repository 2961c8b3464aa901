"""The fleet: which devices, each under which cap (a fleet file, or a SuperNode's
`--node-config`). Torch-free and Flower-free.

A fleet file is TOML, one `[[node]]` table per kind of node (docs/guides/fleet.md):
`device` (any `--device` name), `power_limit_w` (the node's own cap; omit or "none":
no cap), `count` (default 1; repeats are named name-0, name-1, ...), and optionally
`name`, `power_schedule` (a changing cap: a CSV like --power-schedule, relative to the
fleet file) and `read_only`. A SuperNode's node config says the same for its one node:
`--node-config "device='jetson' power-limit-w=5.0 partition-id=0 num-partitions=3"`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple, Union

from undercap.artifacts.io import read_toml
from undercap.errors import UndercapError

NODE_KEYS = ("device", "power_limit_w", "count", "name", "power_schedule", "read_only")


@dataclass(frozen=True)
class NodeSpec:
    """One node: a device under its own cap (None: no cap), optionally changing."""

    name: str
    device: str
    power_limit_w: Optional[float]
    power_schedule: Optional[str] = None  # CSV path on that node
    # measure and train at the clocks as found, never lock (a Jetson without root;
    # NVML is read-only anyway unless allowed): the guard holds the cap with the batch size
    read_only: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FleetSpec:
    nodes: Tuple[NodeSpec, ...]
    source: str = "<fleet>"

    def to_dict(self) -> dict:
        return {"source": self.source, "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FleetSpec:
        return cls(tuple(NodeSpec(**n) for n in d["nodes"]), str(d.get("source", "<fleet>")))


def load_fleet(path: Union[str, Path]) -> FleetSpec:
    """Read and check a fleet file; every problem is one UndercapError line."""
    path = Path(path)
    raw = read_toml(path, "fleet file")
    tables = raw.get("node")
    if not isinstance(tables, list) or not tables:
        raise UndercapError(
            f"fleet file {path}: expected [[node]] tables with device = ... and power_limit_w = ..."
        )
    nodes = []
    for i, t in enumerate(tables, start=1):
        nodes.extend(_expand(t, i, path))
    names = [n.name for n in nodes]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UndercapError(f"fleet file {path}: node names repeat: {', '.join(dup)}")
    return FleetSpec(tuple(nodes), str(path))


def _expand(t: Any, i: int, path: Path) -> list:
    where = f"fleet file {path}, node {i}"
    if not isinstance(t, dict):
        raise UndercapError(f"{where}: expected a table")
    unknown = sorted(set(t) - set(NODE_KEYS))
    if unknown:
        raise UndercapError(f"{where}: unknown key(s) {', '.join(unknown)}; use {NODE_KEYS}")
    device = t.get("device")
    if not isinstance(device, str) or not device:
        raise UndercapError(f'{where}: device = "sim:jetson-nano" (or jetson, nvml:0) missing')
    count = t.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UndercapError(f"{where}: count must be a whole number >= 1, got {count!r}")
    cap = parse_limit(t.get("power_limit_w"), where)
    sched = t.get("power_schedule")
    if sched is not None:
        sched = str((path.parent / str(sched)).resolve())
    read_only = t.get("read_only", False)
    if not isinstance(read_only, bool):
        raise UndercapError(f"{where}: read_only must be true or false, got {read_only!r}")
    base = str(t.get("name") or device.split(":")[-1])
    names = [base] if count == 1 else [f"{base}-{k}" for k in range(count)]
    return [NodeSpec(n, device, cap, sched, read_only) for n in names]


def parse_limit(value: Any, where: str) -> Optional[float]:
    """A cap in W from a file or node config: a positive number, or none."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or float(value) <= 0:
        raise UndercapError(f"{where}: power_limit_w must be a positive number of W or none")
    return float(value)


def node_from_config(
    node_config: Mapping[str, Any], fleet: Optional[FleetSpec]
) -> Tuple[NodeSpec, int, int]:
    """(node, partition id, number of partitions) for a SuperNode: its own node config
    (`device`, `power-limit-w`, ...) wins; else the fleet's entry at its partition id
    (Flower's simulation gives each virtual node `partition-id` and `num-partitions`)."""
    pid = int(node_config.get("partition-id", 0))
    n_parts = int(node_config.get("num-partitions", 1))
    if "device" in node_config:
        node = NodeSpec(
            name=str(node_config.get("name", f"node-{pid}")),
            device=str(node_config["device"]),
            power_limit_w=parse_limit(node_config.get("power-limit-w"), "node config"),
            power_schedule=node_config.get("power-schedule") or None,
            read_only=str(node_config.get("read-only", "false")).strip().lower() == "true",
        )
        return node, pid, n_parts
    if fleet is None or not 0 <= pid < len(fleet.nodes):
        raise UndercapError(
            f"node {pid}: no device in its node config (--node-config \"device='jetson' "
            'power-limit-w=5.0 partition-id=0 num-partitions=N") and no fleet entry for it'
        )
    return fleet.nodes[pid], pid, len(fleet.nodes)
