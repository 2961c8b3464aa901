"""The figure of a run whose cap changed: the cap over time, the power drawn, and the
configuration chosen in each segment (train result `segments`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Union

from undercap.report.figures import new_figure, save_figure


def _steps(segments: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for s in segments:
        v = s.get(key)
        y = float("nan") if v is None else float(v)
        xs += [s["start_s"], s["end_s"]]
        ys += [y, y]
    return xs, ys


def _cap_times(cap: Any, end: float) -> list[float]:
    """The schedule's change times up to `end`, every period of a repeating one."""
    if not cap.period_s:
        return list(cap.times_s)
    cycles = int(end // cap.period_s) + 1
    return [t + k * cap.period_s for k in range(cycles) for t in cap.times_s]


def plot_schedule(
    segments: Sequence[dict[str, Any]],
    path: Union[str, Path],
    *,
    title: str = "",
    cap: Optional[Any] = None,
) -> Path:
    """Top: the cap (a PowerSchedule's steps when given, else each segment's limit),
    each segment's mean and robust peak power. Bottom: batch size and GPU clock."""
    fig = new_figure(figsize=(9, 5.5))
    if not segments:
        raise ValueError("no segments to plot: the run's cap did not change")
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    end = segments[-1]["end_s"]
    if cap is not None:
        xs = [t for t in _cap_times(cap, end) if t <= end] + [end]
        ys = [float("nan") if y is None else y for y in map(cap.limit_at, xs)]
        top.step(xs, ys, where="post", color="tab:red", lw=1.5, label="cap")
    else:
        top.plot(*_steps(segments, "power_limit_w"), color="tab:red", lw=1.5, label="cap")
    top.plot(*_steps(segments, "mean_power_w"), color="tab:blue", lw=1.2, label="mean power")
    top.plot(
        *_steps(segments, "peak_power_w"), color="tab:blue", lw=0.8, ls=":", label="robust peak"
    )
    for s in segments:
        if s.get("batch_size") is None:
            top.axvspan(s["start_s"], s["end_s"], color="0.85", lw=0)
    top.set_ylabel("power (W)")
    top.legend(fontsize=8, loc="upper right")
    top.grid(alpha=0.3)
    top.set_title(title or "power cap over time (grey: paused, no configuration fits)", fontsize=10)
    bottom.plot(*_steps(segments, "batch_size"), color="tab:green", lw=1.5)
    bottom.set_ylabel("batch size", color="tab:green")
    bottom.set_yscale("log", base=2)
    clock = bottom.twinx()
    clock.plot(*_steps(segments, "freq_mhz"), color="tab:purple", lw=1.0, ls="--")
    clock.set_ylabel("GPU clock (MHz)", color="tab:purple")
    bottom.set_xlabel("time from the start of training (s)")
    bottom.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_cap(schedule: Any, path: Union[str, Path], *, title: str = "") -> Path:
    """A schedule by itself: the cap over (schedule) time."""
    fig = new_figure(figsize=(9, 3))
    ax = fig.subplots()
    caps = [float("nan") if c is None else c for c in schedule.limits_w]
    end = schedule.times_s[-1] * 1.01 + 1e-9
    ax.step([*schedule.times_s, end], [*caps, caps[-1]], where="post", color="tab:red")
    ax.set_xlabel("time from the start of training (s)")
    ax.set_ylabel("power cap (W)")
    ax.grid(alpha=0.3)
    ax.set_title(title or f"power cap: {schedule.source}", fontsize=10)
    return save_figure(fig, path)
