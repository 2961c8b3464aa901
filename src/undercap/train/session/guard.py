"""Power guard: keep a training run under its power limit while it runs.

Selection picks (b, f) whose profiled peak plus a safety margin is under the limit
(select/core.py, profile/margin.py), but power drifts (temperature, data, other load).
The guard judges what the limit is judged on, the mean power over a window
(devices/sampler.py; docs/concepts/safety.md):

* a window of at least `window_s` (a fixed 1 s one would let a 0.2 s excess through
  unseen) and SENSOR_UPDATES_PER_WINDOW sensor updates; after every step, every window
  that ended since the last judgement (an excess in mid-step is seen too);
* over the limit: the clock one frequency down; with read-only clocks the batch size
  down its ladder (BATCH_DOWN); where neither can change, the excess recorded and
  warned about; with nothing left to step down to, CapExceededError (exit 4);
* `finish` judges the rest at the end (EXCEEDED_AT_END) and returns the result's
  warning lines.

A run must never exceed its limit silently. No torch import.
"""

import math
import sys
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from undercap import defaults
from undercap._compat import Protocol
from undercap.artifacts.io import from_fields
from undercap.devices.base import SNAP_TOLERANCE_MHZ, Device
from undercap.devices.sampler import summarize
from undercap.errors import CapExceededError, DevicePermissionError

STEP_DOWN = "step_down"
BATCH_DOWN = "batch_down"  # read-only: the next smaller batch size, same clocks
READ_ONLY = "exceeded_read_only"
EXCEEDED_AT_END = "exceeded_at_end"


class WindowMean(Protocol):
    def window_mean_w(self, window_s: float) -> float: ...


@dataclass(frozen=True)
class GuardEvent:
    """One time the limit was exceeded for a whole window."""

    t_s: float  # training time (device clock, excluding evaluation) when it happened
    samples: int  # training samples seen by then
    from_mhz: Optional[float]
    to_mhz: Optional[float]  # same as from_mhz when the clocks could not be changed
    window_mean_w: float  # the highest window mean judged
    limit_w: float
    action: str  # STEP_DOWN, BATCH_DOWN, READ_ONLY or EXCEEDED_AT_END
    window_s: Optional[float] = None  # the guard's window (older results: not recorded)
    from_batch_size: Optional[int] = None  # BATCH_DOWN only
    to_batch_size: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "GuardEvent":
        return from_fields(cls, d)


def current_freq_mhz(device: Device) -> Optional[float]:
    """The clock read back, or None where the device cannot say."""
    try:
        return float(device.current_freq_mhz())
    except Exception:
        return None


def can_control_clocks(device: Device) -> bool:
    """Whether the guard may step clocks down on this device."""
    if device.read_only:
        return False
    try:
        return bool(device.info().control_permitted)
    except Exception:  # a backend that cannot even describe itself: do not touch clocks
        return False


def next_lower_freq_mhz(freqs_mhz: Tuple[float, ...], current_mhz: float) -> Optional[float]:
    """The highest supported frequency strictly below `current_mhz`, or None."""
    lower = [f for f in freqs_mhz if f < current_mhz - 1e-6]
    return max(lower) if lower else None


def next_smaller_batch_size(ladder: Sequence[int], current: int) -> Optional[int]:
    """The largest batch size of `ladder` below `current`; an empty ladder halves
    (powers of two down to 1). None: nothing smaller is left."""
    if not ladder:
        return current // 2 if current > 1 else None
    smaller = [b for b in ladder if b < current]
    return max(smaller) if smaller else None


def guard_window_s(device: Device, window_s: float) -> float:
    """`window_s`, widened to hold SENSOR_UPDATES_PER_WINDOW sensor updates."""
    try:
        update = float(device.sensor_update_interval_s())
    except Exception:  # a backend that cannot say: take the window as given
        update = 0.0
    update = update if math.isfinite(update) and update > 0 else 0.0
    return max(window_s, defaults.SENSOR_UPDATES_PER_WINDOW * update)


def snap_note(snap: Optional[Dict[str, float]], device_name: str) -> Optional[str]:
    """A line for the result when the run did not get the clock it asked for."""
    if not snap:
        return None
    req, step, actual = snap["requested_mhz"], snap["step_mhz"], snap["actual_mhz"]
    if abs(req - step) > SNAP_TOLERANCE_MHZ:
        return f"requested {req:g} MHz, which {device_name} does not offer: ran at {step:g} MHz"
    return f"locked {step:g} MHz but {device_name} read back {actual:g} MHz"


class PowerGuard:
    """Checks the sampler after each training step (module docstring): `check` takes the
    device clock (the sampler's time base: virtual on simulated devices), the training
    time, samples and batch size so far, and returns the event it recorded, if any.
    `ladder`: read-only clocks, the batch sizes it may step down to (empty: halving;
    None: the batch size cannot change)."""

    def __init__(
        self,
        device: Device,
        sampler: WindowMean,
        limit_w: Optional[float],
        *,
        window_s: float = defaults.GUARD_WINDOW_S,
        start_s: float = 0.0,
        events: Optional[List[GuardEvent]] = None,
        warn: bool = True,
        ladder: Optional[Sequence[int]] = None,
    ) -> None:
        if window_s <= 0:
            raise ValueError("guard window must be positive")
        self.device, self.sampler, self.limit_w = device, sampler, limit_w
        self.window_s = guard_window_s(device, window_s)
        self.events: List[GuardEvent] = list(events or [])
        self.exceeded_windows = 0  # windows over the limit (read-only: several per event)
        self._since_s = start_s  # device time since which the current clocks held
        self._checked_s = start_s  # windows ending up to here are judged
        self._control = can_control_clocks(device)
        self._warn = warn
        self._snap = getattr(device, "last_snap", None)  # the lock the session just made
        self.ladder = None if ladder is None else tuple(sorted(set(ladder)))

    def retarget(self, limit_w: Optional[float], now_s: float) -> None:
        """A new limit from `now_s` (the cap changed, the clock was re-locked): the next
        decision needs a whole window at the new settings."""
        self.limit_w = limit_w
        self._since_s = self._checked_s = now_s

    def check(
        self, now_s: float, train_time_s: float, samples: int, batch_size: int = 0
    ) -> Optional[GuardEvent]:
        if self.limit_w is None or now_s - self._since_s < self.window_s:
            return None  # no limit, or the window does not yet lie at the current clocks
        if now_s - self._checked_s < self.window_s:
            return None  # judged less than a window ago; the next judgement covers it
        worst_w = self._worst_window_w(now_s)
        self._checked_s = now_s
        if worst_w is None or not math.isfinite(worst_w) or worst_w <= self.limit_w:
            return None
        self.exceeded_windows += 1
        self._since_s = self._checked_s = now_s  # the next decision needs a whole new window
        current = current_freq_mhz(self.device)
        if self._control:
            return self._step_down(current, worst_w, train_time_s, samples)
        if self.ladder is not None:
            return self._batch_down(current, worst_w, train_time_s, samples, batch_size)
        return self._record(current, worst_w, train_time_s, samples, READ_ONLY)

    def finish(self, now_s: float, train_time_s: float, samples: int) -> List[str]:
        """Judge what the last `check` did not (a run shorter than one window: its mean
        over the whole run) and return lines for the result's warnings."""
        notes = [n for n in (snap_note(self._snap, self.device.name),) if n]
        if self.limit_w is None or now_s <= self._checked_s:
            return notes
        worst_w = self._worst_window_w(now_s)
        self._checked_s = now_s
        if worst_w is not None and math.isfinite(worst_w) and worst_w > self.limit_w:
            self.exceeded_windows += 1
            # read-only: the same excess as during the run (counted); else a new event
            action = EXCEEDED_AT_END if self._control else READ_ONLY
            current = current_freq_mhz(self.device)
            event = self._record(current, worst_w, train_time_s, samples, action)
            if event is not None:
                notes.append(
                    f"power limit {self.limit_w:g} W exceeded in the run's last "
                    f"{now_s - self._since_s:.3g} s (mean {worst_w:.2f} W over "
                    f"{min(self.window_s, now_s - self._since_s):.3g} s), judged at its end"
                )
        return notes

    # --- what the windows say -----------------------------------------------------
    def _worst_window_w(self, now_s: float) -> Optional[float]:
        """The highest mean of the windows that ended since the last judgement, at the
        current clocks (less than a window: the mean over what there is); a sampler
        that gives only the last window's mean (WindowMean) is judged on that."""
        recent = getattr(self.sampler, "recent_readings", None)
        if recent is None:
            return self.sampler.window_mean_w(self.window_s)
        start = max(self._since_s, self._checked_s - self.window_s)
        t, p = recent(max(0.0, now_s - start))
        if t.size == 0:
            return None
        top = float(p.max())
        if t.size == 1 or top <= self.limit_w:  # no window mean can be above every reading
            return top
        stats = summarize(t, p, self.window_s)  # a span under one window: its mean
        return stats.peak_w if t[-1] - t[0] >= self.window_s - 1e-9 else stats.mean_w

    # --- actions -------------------------------------------------------------------
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
            raise CapExceededError(
                f"power limit {self.limit_w:g} W exceeded at {at}: mean {mean_w:.2f} W over "
                f"{self.window_s:g} s; training stopped. Raise the limit or train "
                "with a smaller batch size"
            )
        try:
            actual = float(self.device.set_freq_mhz(lower))
        except DevicePermissionError:
            self._control = False
            return self._record(current, mean_w, t_s, samples, READ_ONLY)
        event = GuardEvent(
            t_s, samples, current, actual, mean_w, float(self.limit_w), STEP_DOWN, self.window_s
        )
        return self._add(
            event,
            f"power guard: mean {mean_w:.2f} W over {self.window_s:g} s above the "
            f"{self.limit_w:g} W limit; stepped down {current:g} -> {actual:g} MHz",
        )

    def _batch_down(
        self, current: Optional[float], mean_w: float, t_s: float, samples: int, b_from: int
    ) -> GuardEvent:
        """Read-only: no clock to step down, so a smaller batch size (module docstring)."""
        b_to = next_smaller_batch_size(self.ladder or (), b_from)
        if b_to is None:
            raise CapExceededError(
                f"power limit {self.limit_w:g} W exceeded at the smallest batch size left "
                f"(mean {mean_w:.2f} W over {self.window_s:g} s) on a device whose clocks "
                "are read-only here; training stopped. Raise the limit, or allow clock "
                "control so the guard can lower the clock"
            )
        limit = float(self.limit_w)  # type: ignore[arg-type]
        event = GuardEvent(
            t_s, samples, current, current, mean_w, limit, BATCH_DOWN, self.window_s, b_from, b_to
        )
        return self._add(
            event,
            f"power guard: mean {mean_w:.2f} W over {self.window_s:g} s above the "
            f"{limit:g} W limit; read-only clocks: batch size {b_from} -> {b_to}",
        )

    def _record(
        self, current: Optional[float], mean_w: float, t_s: float, samples: int, action: str
    ) -> Optional[GuardEvent]:
        # Record the first excess of a kind as an event and count the rest, so a long
        # read-only run does not grow an event per window; the result carries the count.
        if any(e.action == action for e in self.events):
            return None
        limit = float(self.limit_w)  # type: ignore[arg-type]
        event = GuardEvent(t_s, samples, current, current, mean_w, limit, action, self.window_s)
        why = "read-only: cannot step down" if action == READ_ONLY else "judged at the run's end"
        return self._add(
            event,
            f"warning: power limit {limit:g} W exceeded (mean {mean_w:.2f} W over "
            f"{self.window_s:g} s), {why}",
        )

    def _freqs(self) -> Tuple[float, ...]:
        return tuple(sorted(self.device.available_freqs_mhz()))

    def _add(self, event: GuardEvent, line: str) -> GuardEvent:
        """Record `event` and show `line` (on stderr, where the guard warns)."""
        self.events.append(event)
        if self._warn:
            print(line, file=sys.stderr, flush=True)
        return event
