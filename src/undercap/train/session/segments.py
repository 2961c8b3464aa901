"""A run's power record: its segments (one per interval with one configuration and
cap) and what to say about its limit afterwards. A session keeps one SegmentLog; the
open segment survives a checkpoint and a resumed run continues it, or closes it where
the run resumed under another cap. No torch import."""

from typing import Any, Dict, List, Optional, Tuple

from undercap.train.session.guard import BATCH_DOWN, READ_ONLY


class SegmentLog:
    """The run's segments (start_s, end_s, power_limit_w, batch_size, freq_mhz, robust
    peak and mean power, energy, samples); the open one survives a checkpoint (`state`,
    `continue_saved`)."""

    def __init__(self, saved: Optional[Dict[str, Any]] = None) -> None:
        s = saved or {}
        self.segments: List[Dict[str, Any]] = list(s.get("segments", []))
        self._open_saved: Optional[Dict[str, Any]] = s.get("open_segment")
        self._seg: Optional[Dict[str, Any]] = None

    def open(
        self,
        session: Any,
        limit_w: Optional[float],
        batch_size: Optional[int],
        freq_mhz: Optional[float],
    ) -> None:
        self._seg = {
            "start_s": session.schedule_s,
            "power_limit_w": limit_w,
            "batch_size": batch_size,
            "freq_mhz": freq_mhz,
            "_device_t0": session.device.now_s(),
            "_energy0": session.energy_so_far_j(),
            "_samples0": session.samples,
        }

    def is_open(self) -> bool:
        return self._seg is not None

    def close(self, session: Any) -> None:
        seg, self._seg = self._seg, None
        if seg is None or session.schedule_s <= seg["start_s"]:
            return
        # (a switch ahead of a falling cap ends a segment up to one step early)
        stats = session.sampler.stats_between(seg["_device_t0"], session.device.now_s())
        peak = max(seg.get("_peak_w", 0.0), 0.0 if stats is None else stats.peak_w)
        self.segments.append(
            {
                **{k: v for k, v in seg.items() if not k.startswith("_")},
                "end_s": session.schedule_s,
                "peak_power_w": peak if stats is not None or "_peak_w" in seg else None,
                "mean_power_w": None if stats is None else stats.mean_w,
                "energy_j": session.energy_so_far_j() - seg["_energy0"],
                "samples": session.samples - seg["_samples0"],
            }
        )

    def state(self, session: Any = None) -> Dict[str, Any]:
        return {
            "open_segment": None if session is None else self._open_state(session),
            "segments": list(self.segments),
        }

    def _open_state(self, session: Any) -> Optional[Dict[str, Any]]:
        """The segment in progress, as a resumed run continues it (its device clock
        starts over, so the peak so far is kept and energy and samples as offsets)."""
        seg = self._seg
        if seg is None:
            return None
        stats = session.sampler.stats_between(seg["_device_t0"], session.device.now_s())
        return {
            **{k: v for k, v in seg.items() if not k.startswith("_")},  # as close() keeps
            "_peak_w": max(seg.get("_peak_w", 0.0), 0.0 if stats is None else stats.peak_w),
            "_energy0": seg["_energy0"] - session.energy_so_far_j(),
            "_samples0": seg["_samples0"] - session.samples,
        }

    def continue_saved(self, session: Any) -> None:
        """The open segment of the checkpoint, continued by the one just opened; closed
        as it was where the run resumed under another cap (a segment of its own)."""
        seg, saved, self._open_saved = self._seg, self._open_saved, None
        if seg is None or not saved:
            return
        if saved.get("power_limit_w", seg["power_limit_w"]) != seg["power_limit_w"]:
            self._close_saved(session, saved)
            return
        seg["start_s"], seg["_peak_w"] = saved["start_s"], saved["_peak_w"]
        seg["_energy0"] = session.energy_so_far_j() + saved["_energy0"]
        seg["_samples0"] = session.samples + saved["_samples0"]

    def end_saved(self, session: Any) -> None:
        """The checkpoint's open segment, ended where the run resumed (a resume that
        does not go on as it was: it selects again, or waits for power)."""
        saved, self._open_saved = self._open_saved, None
        if saved:
            self._close_saved(session, saved)

    def _close_saved(self, session: Any, saved: Dict[str, Any]) -> None:
        """The checkpoint's open segment, ended at the resume: its peak as saved, its
        energy and samples from the offsets (the accounts came back as they were)."""
        if session.schedule_s <= saved["start_s"]:
            return
        self.segments.append(
            {
                "start_s": saved["start_s"],
                "power_limit_w": saved["power_limit_w"],
                "batch_size": saved.get("batch_size"),
                "freq_mhz": saved.get("freq_mhz"),
                "end_s": session.schedule_s,
                "peak_power_w": saved["_peak_w"] or None,
                "mean_power_w": -saved["_energy0"] / (session.schedule_s - saved["start_s"]),
                "energy_j": -saved["_energy0"],
                "samples": -saved["_samples0"],
            }
        )


def _over(segment: Dict[str, Any]) -> bool:
    """A training segment whose robust peak went above its own limit."""
    limit, peak = segment.get("power_limit_w"), segment.get("peak_power_w")
    return segment.get("batch_size") is not None and None not in (limit, peak) and peak > limit


def limit_exceeded(
    acc: Dict[str, Any], limit: Optional[float], segments: Tuple[Dict[str, Any], ...]
) -> bool:
    """Whether the run went over its cap: a segment over its own limit where the run has
    segments (the cap changed, or the batch size), else the robust peak over the limit."""
    if segments:
        return any(_over(s) for s in segments)
    return limit is not None and acc["peak_w"] > limit


def limit_warnings(
    acc: Dict[str, Any],
    events: List[Dict[str, Any]],
    limit: Optional[float],
    window_s: float,
    segments: Tuple[Dict[str, Any], ...] = (),
) -> List[str]:
    """What to say about the power limit after a run (a run never exceeds it silently):
    a fixed limit's verdict, and each segment over its own."""
    return _fixed_limit_lines(acc, events, limit, window_s) + [
        f"segment {s['start_s']:.3g}-{s['end_s']:.3g} s: robust peak "
        f"{s['peak_power_w']:.2f} W above its {s['power_limit_w']:g} W limit"
        for s in segments
        if _over(s)
    ]


def _fixed_limit_lines(
    acc: Dict[str, Any], events: List[Dict[str, Any]], limit: Optional[float], window_s: float
) -> List[str]:
    if limit is None:
        return []
    if any(e["action"] == READ_ONLY for e in events):
        return [
            f"power limit {limit:g} W exceeded for {acc['exceeded_windows']} window(s) of "
            f"{window_s:g} s; read-only: cannot step down"
        ]
    if acc["peak_w"] <= limit:
        return []
    if events:
        what = "batch size" if any(e["action"] == BATCH_DOWN for e in events) else "clock"
        return [
            f"robust peak power {acc['peak_w']:.2f} W went above the {limit:g} W limit "
            f"for up to one {window_s:g} s guard window before the guard "
            f"stepped the {what} down (see guard events)"
        ]
    return [
        f"robust peak power {acc['peak_w']:.2f} W went above the {limit:g} W limit "
        f"(only in bursts shorter than the {window_s:g} s guard window)"
    ]
