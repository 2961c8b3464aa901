"""A training session on a device: the one place the device time, energy and power of
training are accounted and the power cap is held, made by the handle every loop trains
with (train/api.py's `Capped`; undercap's own loop, train/runner.py, included).

Entering takes control of the clocks where permitted (devices.base.controlled: restored
on every exit path, Ctrl-C and SIGTERM included), locks the chosen frequency and starts
the power sampler, the meter (meter.py) and the guard (guard.py). Per step,
`step(samples)` meters it, lets the guard judge and, under a cap that changes, asks the
follower (follow.py) what to train at next; the session applies what is the device's
and returns a new batch size, the loop's own business. Work that is not training
happens in `paused()`. Read-only clocks are never locked (one line says so): the guard
holds the cap with the batch size, down `batch_ladder` (docs/concepts/safety.md).
"""

import contextlib
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from undercap import defaults
from undercap.artifacts.workload import Workload
from undercap.devices.base import Device, controlled
from undercap.devices.sampler import PowerSampler
from undercap.errors import UndercapError
from undercap.train.cap import Cap, changes
from undercap.train.session.follow import CapFollower, Change, Reselector
from undercap.train.session.guard import (
    STEP_DOWN,
    GuardEvent,
    PowerGuard,
    can_control_clocks,
    current_freq_mhz,
)
from undercap.train.session.meter import Accounts, Meter
from undercap.train.session.segments import SegmentLog, limit_exceeded, limit_warnings

#: what the result's `clocks` says: a lock held, the clocks left as they were because
#: none was asked for, or left because they may not be changed here
LOCKED, AS_FOUND, READ_ONLY_AS_FOUND = "locked", "as found", "read-only: clocks as found"


def say(line: str) -> None:
    """A line on stderr while training runs (beside the progress bar)."""
    print(line, file=sys.stderr, flush=True)


class Session:
    """Context manager: clocks locked, power sampled and guarded, training accounted.

    cap: the run's cap (train/cap.py); one that changes needs the `reselector` that
        picks (b, f) at every change.
    freq_mhz: the clock to lock (None: leave the clocks as they are).
    workload: what one sample costs (a simulated device needs it for its clock).
    saved: a checkpoint's state (`state()`) to continue from, and `samples`: the
        samples trained before (a resumed run).
    batch_size: the batch size trained; `batch_ladder`: read-only clocks, the batch
        sizes the guard may step down to (empty: halving); `switch_batch=False` where
        the loop cannot change its batch size (an excess is then only recorded).
    """

    def __init__(
        self,
        device: Device,
        cap: Cap,
        *,
        freq_mhz: Optional[float],
        workload: Optional[Workload],
        batch_size: int,
        guard_window_s: float = defaults.GUARD_WINDOW_S,
        sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
        cuda_sync: Optional[Callable[[], None]] = None,
        saved: Optional[Dict[str, Any]] = None,
        samples: int = 0,
        reselector: Optional[Reselector] = None,
        batch_ladder: Sequence[int] = (),
        switch_batch: bool = True,
    ) -> None:
        s = saved or {}
        self.device, self.cap, self.workload, self.cuda_sync = device, cap, workload, cuda_sync
        self.freq_requested, self.batch_size = freq_mhz, int(batch_size)
        self.power_limit_w = getattr(cap, "limit_w", None)  # in force now (the follower's)
        self.guard_window_s, self.sample_rate_hz = guard_window_s, sample_rate_hz
        self.acc = Accounts(s.get("accounts"))
        self._events = [GuardEvent.from_dict(e) for e in s.get("guard_events", [])]
        if changes(cap) and reselector is None:
            raise UndercapError(
                "a cap that changes re-selects (b, f) at every change: it needs a profile and "
                "r(b) (a reselector)"
            )
        self.follower = CapFollower(cap, reselector, s.get("follower")) if changes(cap) else None
        # a fixed cap's segments (kept where the batch changed) or a changing cap's
        # (checkpoints of 0.2.0 kept a changing cap's in the follower's state)
        self.log = SegmentLog(s.get("segments") or s.get("follower"))
        self.batch_ladder, self.switch_batch = tuple(sorted(set(batch_ladder))), switch_batch
        self.samples = samples  # trained so far (a resumed run starts where it was)
        self._stack = contextlib.ExitStack()
        self.freq_start: Optional[float] = None
        self.clocks: Optional[str] = None  # LOCKED, AS_FOUND or READ_ONLY_AS_FOUND
        self.notes: List[str] = []  # lines for the result's warnings
        self._control = False
        # Guard events from here on belong to the clock locked now: a new configuration
        # and a wait for power move it past the step-downs of an earlier one.
        self._events_from = 0

    # --- lifecycle ------------------------------------------------------------------
    def __enter__(self) -> "Session":
        with contextlib.ExitStack() as stack:
            control = self._control = can_control_clocks(self.device)
            if control:
                stack.enter_context(controlled(self.device))
            if self.follower is None:  # else the follower's first Change locks
                self.freq_start = self._lock(self.freq_requested, control)
            else:  # nothing is locked yet, even the clock a resumed run's checkpoint
                # names (the device came back unlocked)
                self.freq_requested = None
                self.clocks = LOCKED if control else READ_ONLY_AS_FOUND
            self.sampler = stack.enter_context(
                PowerSampler(self.device, rate_hz=self.sample_rate_hz)
            )
            switch = not control and self.switch_batch
            self.guard = PowerGuard(
                self.device,
                self.sampler,
                self.power_limit_w,
                window_s=self.guard_window_s,
                start_s=self.device.now_s(),
                events=self._events,
                ladder=self.batch_ladder if switch else None,
            )
            self.meter = Meter(self.device, self.sampler, self.acc, self.cuda_sync)
            if self.follower is not None:
                self._follow(self.follower.start(self.schedule_s, self.energy_so_far_j()))
                self.freq_start = self.freq_requested
            else:
                self.log.open(self, self.power_limit_w, self.batch_size, self.freq_start)
                self.log.continue_saved(self)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop sampling and give the clocks back (idempotent)."""
        try:
            if hasattr(self, "sampler"):
                self.log.close(self)
        finally:
            self._stack.close()

    def _lock(self, freq_mhz: Optional[float], control: bool) -> Optional[float]:
        """Lock `freq_mhz` where the clocks may be changed; else train at the clocks as
        found (module docstring), saying so once."""
        if freq_mhz is None or not control:
            found = current_freq_mhz(self.device)
            self.clocks = AS_FOUND if control else READ_ONLY_AS_FOUND
            if freq_mhz is not None and not self.notes:
                now = "" if found is None else f" ({found:g} MHz now)"
                self.notes.append(
                    f"{self.device.name} is read-only here: {freq_mhz:g} MHz was chosen on a "
                    f"device with clock control; training at the clocks as found{now}"
                )
                say(f"note: {self.notes[-1]}")
            return found
        self.clocks = LOCKED
        return float(self.device.set_freq_mhz(freq_mhz))

    # --- training work -------------------------------------------------------------
    def pause(self) -> None:
        """Stop charging: what follows (evaluation, checkpoints) is not training."""
        self.meter.close_span()

    def resume(self) -> None:
        """Charge again from now on."""
        self.meter.begin_span()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Work inside the block (evaluation, checkpoints) is not charged to training."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def step(self, samples: int) -> Optional[int]:
        """Account one optimizer step that trained on `samples` samples; the batch size
        to train with from the next step when the guard or the cap changed it, else None."""
        before = self.batch_size
        self.meter.step(self.workload, samples)
        self.samples += samples
        event = self.guard.check(
            self.device.now_s(), self.acc.train_time_s, self.samples, self.batch_size
        )
        if event is not None and event.to_batch_size is not None:
            self._batch_down(event.to_batch_size)  # read-only: the guard's step down
        if self.follower is not None:
            change = self.follower.after_step(
                self.schedule_s, self.meter.last_step_s, samples, self.energy_so_far_j()
            )
            if change is not None:
                self._follow(change)
        return None if self.batch_size == before else self.batch_size

    def add_eval(self, n_items: int, batch_size: int, wall_s: float) -> float:
        """Count an evaluation (meter.py); returns the device seconds counted."""
        return self.meter.add_eval(self.workload, n_items, batch_size, wall_s)

    # --- what the guard and the follower decided ---------------------------------------
    @property
    def schedule_s(self) -> float:
        """The schedule's clock: training plus waiting for power (train/cap.py)."""
        return self.acc.train_time_s + self.acc.pause_time_s

    def energy_so_far_j(self) -> float:
        return self.meter.energy_so_far_j()

    def _batch_down(self, batch_size: int) -> None:
        """Read-only: the next smaller batch size from the next step on, in a segment
        of its own, and the configuration a resume holds."""
        self.log.close(self)
        self.log.open(self, self.power_limit_w, batch_size, self.freq_requested)
        if self.follower is not None:
            self.follower.switched(batch_size)
        self.batch_size = batch_size

    def _follow(self, change: Change) -> None:
        """Apply the follower's Change: wait while it says pause, then the configuration."""
        if not change.held:
            self.log.end_saved(self)  # a resumed run that does not go on as checkpointed
        if change.note:
            say(change.note)
        if change.point is None:
            change = self._wait(change)
        self.log.close(self)
        point = change.point
        assert point is not None
        if self._control and point.freq_mhz != self.freq_requested:
            self._lock(point.freq_mhz, True)
        self.freq_requested, self.batch_size = point.freq_mhz, point.batch_size
        self.power_limit_w = change.limit_w
        self.guard.retarget(change.limit_w, self.device.now_s())
        self._events_from = len(self.guard.events)
        self.meter.begin_span()
        self.log.open(self, change.limit_w, point.batch_size, point.freq_mhz)
        if change.held:  # a resumed run: the checkpoint's segment, continued
            self.log.continue_saved(self)

    def _wait(self, change: Change) -> Change:
        """Pause (clocks at their minimum, one segment per limit) until the follower
        returns a configuration; it raises PowerWaitError past the cap's bound."""
        self.log.close(self)
        while change.point is None:
            if change.limit_w != self.power_limit_w or not self.log.is_open():
                self.log.close(self)
                self.power_limit_w = change.limit_w
                self.log.open(self, change.limit_w, None, None)
            self.wait_for_power(change.wait_s, wall=change.wall)
            change = self.follower.after_wait(self.schedule_s, self.energy_so_far_j())  # type: ignore[union-attr]
            if change.note:
                say(change.note)
        return change

    def wait_for_power(self, seconds: float, wall: bool = False) -> None:
        """Pause training for `seconds` of schedule time, clocks at their minimum (the
        least the idle GPU draws), counted as paused. `wall`: asleep on the host's clock
        too (a live source is rewritten in real time, whatever a simulated clock does)."""
        self.meter.close_span()
        if self._control:
            self.device.set_freq_mhz(min(self.device.available_freqs_mhz()))
            self.freq_requested = None
            self._events_from = len(self.guard.events)
        e0 = self.device.energy_j() if self.meter.use_counter else None
        t0, wall_t0 = self.device.now_s(), time.monotonic()
        self.device.wait_s(seconds)
        if wall:  # a real device slept already; a simulated one only moved its clock
            time.sleep(max(0.0, seconds - (time.monotonic() - wall_t0)))
        self.meter.waited(seconds, t0, e0)
        self.meter.begin_span()

    # --- what happened ----------------------------------------------------------------
    def snapshot(self) -> Dict[str, Any]:
        """The accounts with this process's power peaks (meter.py) and guard windows."""
        return self.meter.snapshot(self.guard.exceeded_windows)

    def state(self) -> Dict[str, Any]:
        """What a checkpoint keeps of the session (`saved=` continues from it)."""
        return {
            "accounts": self.snapshot(),
            "freq_mhz": self.locked_mhz(),
            "guard_events": [e.to_dict() for e in self.guard.events],
            "cap": self.cap.source,  # a resume under another cap says so
            "follower": None if self.follower is None else self.follower.state(),
            "segments": self.log.state(self),
        }

    def locked_mhz(self) -> Optional[float]:
        """The clock the run holds now: the guard's last step-down since the current
        configuration was applied, else the one locked for it (not a read-back, which a
        thermal cap may lower)."""
        events = self.guard.events[self._events_from :]
        downs = [e.to_mhz for e in events if e.action == STEP_DOWN]
        return downs[-1] if downs else self.freq_requested

    def segments(self) -> Tuple[Dict[str, Any], ...]:
        """The result's segments: a changing cap's, or a fixed cap's once the batch size
        changed (a run that never switched has none)."""
        segs = tuple(self.log.segments)
        return segs if self.follower is not None or len(segs) > 1 else ()

    def totals(self, final: bool = True) -> Dict[str, Any]:
        """The device side of a result (artifacts.train_result.RunTotals' fields but the
        loop's) and its warnings; `final`: at the end of the run, before the clocks are
        restored, with the guard's last judgement (guard.finish)."""
        end: List[str] = []
        if final:
            end = self.guard.finish(self.device.now_s(), self.acc.train_time_s, self.samples)
            self.log.close(self)  # the last segment ends with the run
        acc, segments = self.snapshot(), self.segments()
        limit = getattr(self.cap, "limit_w", None)  # a fixed cap's; a schedule names itself
        elapsed = acc["train_time_s"] + acc["pause_time_s"]  # waiting counts to the target
        events = tuple(e.to_dict() for e in self.guard.events)
        # the session's notes, what the cap had to say (a live source gone unreadable), the end
        warnings = self.notes + list(getattr(self.cap, "notes", ())) + end
        warnings += limit_warnings(acc, list(events), limit, self.guard_window_s, segments)
        return {
            "train_time_s": acc["train_time_s"],
            "energy_j": acc["energy_j"],
            "peak_power_w": acc["peak_w"],
            "mean_power_w": acc["energy_j"] / elapsed if elapsed > 0 else 0.0,
            "freq_mhz_start": self.freq_start,
            "freq_mhz_final": current_freq_mhz(self.device),
            "power_limit_w": limit,
            "limit_exceeded": limit_exceeded(acc, limit, segments),
            "guard_events": events,
            "simulated": self.device.is_simulated,
            "pause_time_s": acc["pause_time_s"],
            "segments": segments,
            "clocks": self.clocks,
            "warnings": tuple(dict.fromkeys(warnings)),  # each once, in order
        }
