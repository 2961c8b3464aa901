"""The devices table `undercap devices` prints: every device, then details of the
real ones (Jetson board, nvpmodel, rails; NVML GPU and power limits), then notes."""

from typing import Any, Dict, List, Tuple


def _freqs(freqs: Tuple[float, ...]) -> str:
    if not freqs:
        return "-"
    if len(freqs) == 1:
        return f"{freqs[0]:g}"
    return f"{freqs[0]:g} .. {freqs[-1]:g} ({len(freqs)} steps)"


def _control(info: Any) -> str:
    if info.is_simulated:
        return "yes (simulated)" if info.control_permitted else "no"
    return str(info.details.get("control") or ("yes" if info.control_permitted else "no"))


def format_devices(infos: List[Any], notes: List[str]) -> str:
    """A table of every device, then details of the real ones, then notes."""
    head = ("NAME", "BACKEND", "FREQUENCIES (MHz)", "MEMORY", "POWER SENSORS", "CONTROL")
    rows = [
        (
            i.name,
            i.backend,
            _freqs(i.freqs_mhz),
            f"{i.memory_bytes / 2**30:.1f} GiB" if i.memory_bytes else "?",
            ", ".join(i.power_sensors) or "none",
            _control(i),
        )
        for i in infos
    ]
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in [head, *rows]
    ]
    for info in infos:
        if info.backend == "jetson":
            lines += ["", *_jetson_lines(info)]
        elif info.backend == "nvml":
            lines += ["", *_nvml_lines(info)]
    if any(i.is_simulated for i in infos):
        lines += ["", "sim:* devices are SIMULATED: their clocks and power come from a model."]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def _jetson_lines(info: Any) -> List[str]:
    d = info.details
    lines = [
        f"{info.name}: {d.get('board') or 'unknown board'}, L4T {d.get('l4t') or '?'}, "
        f"GPU {d.get('gpu') or '?'} ({d.get('devfreq_node')})"
    ]
    lines += _mode_lines(d)
    if d.get("gpu_woken"):
        lines.append(f"  note: {d['gpu_woken']}")
    power = d.get("power") or {}
    if power.get("rails"):
        rails = ", ".join(f"{k} ({v})" for k, v in power["rails"].items())
        gpu = power.get("gpu_rail") or power.get("gpu_combined_rail") or "none"
        lines.append(f"  power: board = {power.get('total_rail')}; GPU rail = {gpu}")
        lines.append(f"  rails: {rails}")
    else:
        lines.append("  power: no INA3221 rails found: power cannot be measured")
    lines.append(
        f"  now: {d.get('cur_freq_mhz'):g} MHz (min {d.get('min_freq_mhz'):g}, max "
        f"{d.get('max_freq_mhz'):g}), governor {d.get('governor')}, railgate_enable "
        f"{d.get('railgate_enable')}"
    )
    if d.get("devfreq_limits"):
        lines.append(f"  min_freq/max_freq: {d['devfreq_limits']}")
    return lines


def _mode_lines(d: Dict[str, Any]) -> List[str]:
    """The power mode: what its conf says, and the steps it allows (floor, ceiling)."""
    nvp = d.get("nvpmodel")
    if not nvp:
        return ["  nvpmodel: none found (all table steps offered)"]
    conf = []
    if nvp.get("gpu_max_freq_mhz"):
        conf.append(f"GPU MAX_FREQ {nvp['gpu_max_freq_mhz']:g} MHz")
    if nvp.get("gpu_min_freq_mhz"):
        conf.append(f"MIN_FREQ {nvp['gpu_min_freq_mhz']:g} MHz")
    return [
        f"  nvpmodel: mode {nvp.get('mode_id')} {nvp.get('mode_name') or '?'} "
        f"({'; '.join(conf) or 'no GPU cap'} in its conf; from {nvp.get('source')})",
        f"  power mode allows: {nvp.get('floor_mhz'):g} .. {nvp.get('ceiling_mhz'):g} MHz "
        f"(ceiling: {nvp.get('ceiling_from')})",
    ]


def _nvml_lines(info: Any) -> List[str]:
    d = info.details
    lim = d.get("power_limit_constraints_w")
    return [
        f"{info.name}: {d.get('gpu')} ({d.get('uuid')}), driver {d.get('driver')}",
        f"  power: {d.get('power_source')}; limit {d.get('power_limit_w')} W"
        + (f" (allowed {lim[0]:g} .. {lim[1]:g} W)" if lim else ""),
    ]
