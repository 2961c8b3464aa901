"""Power guard: keep a training run under its power limit while it runs.

Selection picks (b, f) from a profile whose peak power was under the limit, but the
profile is a short measurement and power drifts (temperature, data, other load). The
guard watches the power sampler during training: when the mean power over the last
`window_s` seconds, all spent at the current frequency, is above the limit, the power
has been over the limit for longer than the window, so it steps the GPU down to the
next lower frequency and records the event. A single noisy reading never triggers it
(sensor ripple is why the window exists); a sustained excess always does.

A run must never exceed its limit silently (issue "On-device training", point 2):
* at the lowest frequency there is nothing left to step down to: InfeasibleError
  stops the run, naming the power reached and what to do;
* on a device whose clocks we may not change (read-only, no permission) the event is
  recorded and a warning is printed, and the result shows it.
No torch import: the guard only talks to the device and the sampler.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from typing import Any, Optional, Protocol

from undercap import defaults
from undercap.devices.base import Device
from undercap.errors import DevicePermissionError, InfeasibleError

STEP_DOWN = "step_down"
READ_ONLY = "exceeded_read_only"


class WindowMean(Protocol):
    def window_mean_w(self, window_s: float) -> float: ...


@dataclass(frozen=True)
class GuardEvent:
    """One time the limit was exceeded for a whole window."""

    t_s: float  # training time (device clock, excluding evaluation) when it happened
    samples: int  # training samples seen by then
    from_mhz: Optional[float]
    to_mhz: Optional[float]  # same as from_mhz when the clocks could not be changed
    window_mean_w: float
    limit_w: float
    action: str  # STEP_DOWN or READ_ONLY

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GuardEvent:
        return cls(
            t_s=float(d["t_s"]),
            samples=int(d["samples"]),
            from_mhz=None if d["from_mhz"] is None else float(d["from_mhz"]),
            to_mhz=None if d["to_mhz"] is None else float(d["to_mhz"]),
            window_mean_w=float(d["window_mean_w"]),
            limit_w=float(d["limit_w"]),
            action=str(d["action"]),
        )


def can_control_clocks(device: Device) -> bool:
    """Whether the guard may step clocks down on this device."""
    if device.read_only:
        return False
    try:
        return bool(device.info().control_permitted)
    except Exception:  # a backend that cannot even describe itself: do not touch clocks
        return False


def next_lower_freq_mhz(freqs_mhz: tuple[float, ...], current_mhz: float) -> Optional[float]:
    """The highest supported frequency strictly below `current_mhz`, or None."""
    lower = [f for f in freqs_mhz if f < current_mhz - 1e-6]
    return max(lower) if lower else None


class PowerGuard:
    """Checks the sampler after each training step; see the module docstring.

    `check(now_s, train_time_s, samples)` is called with the device clock (wall on
    real devices, virtual on simulated ones: the sampler's time base), the training
    time so far and the samples seen; it returns the event it recorded, if any.
    """

    def __init__(
        self,
        device: Device,
        sampler: WindowMean,
        limit_w: Optional[float],
        *,
        window_s: float = defaults.GUARD_WINDOW_S,
        start_s: float = 0.0,
        events: Optional[list[GuardEvent]] = None,
        warn: bool = True,
    ) -> None:
        if window_s <= 0:
            raise ValueError("guard window must be positive")
        self.device = device
        self.sampler = sampler
        self.limit_w = limit_w
        self.window_s = window_s
        self.events: list[GuardEvent] = list(events or [])
        self.exceeded_windows = 0  # windows over the limit (read-only: several per event)
        self._since_s = start_s  # device time since which the current clocks held
        self._control = can_control_clocks(device)
        self._warn = warn

    def retarget(self, limit_w: Optional[float], now_s: float) -> None:
        """A new limit from `now_s` (the cap changed, the clock was re-locked): the next
        decision needs a whole window at the new settings."""
        self.limit_w = limit_w
        self._since_s = now_s

    def check(self, now_s: float, train_time_s: float, samples: int) -> Optional[GuardEvent]:
        if self.limit_w is None or now_s - self._since_s < self.window_s:
            return None  # no limit, or the window does not yet lie at the current clocks
        mean_w = self.sampler.window_mean_w(self.window_s)
        if mean_w is None or not math.isfinite(mean_w) or mean_w <= self.limit_w:
            return None
        self.exceeded_windows += 1
        self._since_s = now_s  # the next decision needs a whole new window
        current = self._current_mhz()
        if self._control:
            event = self._step_down(current, mean_w, train_time_s, samples)
        else:
            event = self._record_read_only(current, mean_w, train_time_s, samples)
        return event

    # --- actions -------------------------------------------------------------------
    def _current_mhz(self) -> Optional[float]:
        try:
            return float(self.device.current_freq_mhz())
        except Exception:
            return None

    def _step_down(
        self, current: Optional[float], mean_w: float, t_s: float, samples: int
    ) -> Optional[GuardEvent]:
        lower = None if current is None else next_lower_freq_mhz(self._freqs(), current)
        if lower is None:
            at = (
                "an unknown frequency"
                if current is None
                else f"the lowest frequency {current:g} MHz"
            )
            raise InfeasibleError(
                f"power limit {self.limit_w:g} W exceeded at {at}: mean {mean_w:.2f} W over "
                f"the last {self.window_s:g} s; training stopped. Raise the limit or train "
                "with a smaller batch size"
            )
        try:
            actual = float(self.device.set_freq_mhz(lower))
        except DevicePermissionError:
            self._control = False
            return self._record_read_only(current, mean_w, t_s, samples)
        event = GuardEvent(t_s, samples, current, actual, mean_w, float(self.limit_w), STEP_DOWN)
        self.events.append(event)
        self._say(
            f"power guard: mean {mean_w:.2f} W over {self.window_s:g} s above the "
            f"{self.limit_w:g} W limit; stepped down {current:g} -> {actual:g} MHz"
        )
        return event

    def _record_read_only(
        self, current: Optional[float], mean_w: float, t_s: float, samples: int
    ) -> Optional[GuardEvent]:
        # Record the first excess as an event and count the rest, so a long read-only
        # run does not grow an event per window; the result carries the count.
        if any(e.action == READ_ONLY for e in self.events):
            return None
        event = GuardEvent(t_s, samples, current, current, mean_w, float(self.limit_w), READ_ONLY)
        self.events.append(event)
        self._say(
            f"warning: power limit {self.limit_w:g} W exceeded (mean {mean_w:.2f} W over "
            f"{self.window_s:g} s), read-only: cannot step down"
        )
        return event

    def _freqs(self) -> tuple[float, ...]:
        return tuple(sorted(self.device.available_freqs_mhz()))

    def _say(self, line: str) -> None:
        if self._warn:
            print(line, file=sys.stderr, flush=True)
