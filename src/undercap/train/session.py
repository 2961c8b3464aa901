"""A training session on a device: the one place the device time, energy and power of
training are accounted and the power cap is held. `train_on_device` runs its loop in
one; users' own loops get one from `undercap.capped` (train/api.py).

Entering a session takes control of the clocks where that is permitted
(devices.base.controlled: the original settings come back on every exit path,
Ctrl-C and SIGTERM included), locks the chosen frequency, starts the power sampler
and the guard. Then, per optimizer step, `step(samples)`:
* charges the device the step (`account_step`: a simulated device advances its
  virtual clock by t(b, f) * b; real devices already did the work) and synchronises,
  so device-clock deltas bracket exactly the training work;
* adds the delta to the training time, and the energy: the device counter's delta
  where there is one; on a simulated device the sampler's integral over its whole
  window (its clock only advances in training steps); otherwise the sampler's mean
  power over each span of steps times its length;
* lets the power guard (guard.py) check the sampler.
Work that is not training (evaluation, checkpoints) happens inside `paused()`.

Read-only (the device's clocks may not be changed: `--read-only`, NVML's default, no
root) means: train at the clocks as found, never lock. A clock the session is asked
to lock there (a selection made on a device with control) is not locked: one line
says so, and the result records "read-only: clocks as found". The cap is then held
with the batch size: the guard moves to the next smaller one of `batch_ladder`
(halving where none is given) at the next step boundary, recorded as a segment.
"""

import contextlib
import dataclasses
import math
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from undercap import defaults
from undercap.artifacts.workload import Workload
from undercap.devices.base import Device, controlled
from undercap.train.follow import CapFollower, SegmentLog
from undercap.train.guard import (
    STEP_DOWN,
    GuardEvent,
    PowerGuard,
    can_control_clocks,
    next_smaller_batch_size,
)
from undercap.train.schedule import OperatingPoint

#: what the result's `clocks` says: a lock held, the clocks left as they were because
#: none was asked for, or left because they may not be changed here
LOCKED, AS_FOUND, READ_ONLY_AS_FOUND = "locked", "as found", "read-only: clocks as found"


class Accounts:
    """Device-side totals of the training spans; they survive a resume (checkpoint)."""

    def __init__(self, saved: Optional[Dict[str, Any]] = None) -> None:
        s = saved or {}
        self.train_time_s = float(s.get("train_time_s", 0.0))
        self.energy_j = float(s.get("energy_j", 0.0))
        self.peak_w = float(s.get("peak_w", 0.0))
        self.max_raw_w = float(s.get("max_raw_w", 0.0))
        self.exceeded_windows = int(s.get("exceeded_windows", 0))
        self.pause_time_s = float(s.get("pause_time_s", 0.0))  # waiting for power
        self.eval_time_s = float(s.get("eval_time_s", 0.0))  # device time evaluating
        self.last_ckpt_time_s = float(s.get("last_ckpt_time_s", self.train_time_s))
        self.last_ckpt_samples = int(s.get("last_ckpt_samples", 0))

    def to_dict(self) -> Dict[str, Any]:
        return dict(vars(self))


def current_freq_mhz(device: Device) -> Optional[float]:
    """The clock read back, or None where the device cannot say."""
    try:
        return float(device.current_freq_mhz())
    except Exception:
        return None


class Session:
    """Context manager: clocks locked, power sampled and guarded, training accounted.

    freq_mhz: the clock to lock (None: leave the clocks as they are).
    workload: what one sample costs (a simulated device needs it to advance its clock;
        real devices may pass None).
    saved: a checkpoint's {"accounts", "guard_events"} to continue from, and
    samples: the samples trained before (both from a resumed run).
    follower: a follow.CapFollower when the cap changes during training; it sets the
        configuration through `apply`.
    on_switch: called with the new batch size whenever the follower or the guard moves
        to another (at a step boundary): the loop that owns the batches listens here;
        `batch_size` is the one in force.
    batch_ladder: read-only clocks: the batch sizes the guard may step down to (the
        selection's candidates); empty: halving. `switch_batch=False` where the loop
        cannot change its batch size (then an excess is only recorded).
    """

    def __init__(
        self,
        device: Device,
        *,
        power_limit_w: Optional[float],
        freq_mhz: Optional[float],
        workload: Optional[Workload],
        guard_window_s: float = defaults.GUARD_WINDOW_S,
        sample_rate_hz: float = defaults.TRAIN_SAMPLE_RATE_HZ,
        cuda_sync: Optional[Callable[[], None]] = None,
        saved: Optional[Dict[str, Any]] = None,
        samples: int = 0,
        follower: Optional[CapFollower] = None,
        batch_size: Optional[int] = None,
        batch_ladder: Sequence[int] = (),
        switch_batch: bool = True,
    ) -> None:
        self.device, self.workload, self.cuda_sync = device, workload, cuda_sync
        self.power_limit_w, self.freq_requested = power_limit_w, freq_mhz
        self.guard_window_s, self.sample_rate_hz = guard_window_s, sample_rate_hz
        self.acc = Accounts(saved.get("accounts") if saved else None)
        self._events = (
            [GuardEvent.from_dict(e) for e in saved.get("guard_events", [])] if saved else []
        )
        self._stack = contextlib.ExitStack()
        self.freq_start: Optional[float] = None
        self.samples = samples  # trained so far (a resumed run starts where it was)
        self.follower, self.batch_size = follower, batch_size
        self.on_switch: Optional[Callable[[int], None]] = None
        self.batch_ladder, self.switch_batch = tuple(sorted(set(batch_ladder))), switch_batch
        # a fixed cap's segments (a follower keeps its own): kept where the batch changed
        self.log = (
            follower.log
            if follower is not None
            else SegmentLog(saved.get("segments") if saved else None)
        )
        self.clocks: Optional[str] = None  # LOCKED, AS_FOUND or READ_ONLY_AS_FOUND
        self.notes: List[str] = []  # lines for the result's warnings
        self.last_step_s = 0.0  # device time of the latest step
        self._control = False
        self._seg_peak_w = self._seg_max_raw_w = 0.0
        # Guard events from here on belong to the clock locked now: apply() and
        # wait_for_power() move it past the step-downs of an earlier configuration.
        self._events_from = 0

    # --- lifecycle ------------------------------------------------------------------
    def __enter__(self) -> "Session":
        from undercap.devices.sampler import PowerSampler

        with contextlib.ExitStack() as stack:
            control = self._control = can_control_clocks(self.device)
            if control:
                stack.enter_context(controlled(self.device))
            if self.follower is None:  # else the follower locks what it chooses
                self.freq_start = self._lock(self.freq_requested, control)
            else:  # nothing is locked yet: its first apply() locks, even the clock a
                # resumed run's checkpoint names (the device came back unlocked)
                self.freq_requested = None
                self.clocks = LOCKED if control else READ_ONLY_AS_FOUND
            self.sampler = stack.enter_context(
                PowerSampler(self.device, rate_hz=self.sample_rate_hz)
            )
            switch = not control and self.switch_batch and self.batch_size is not None
            self.guard = PowerGuard(
                self.device,
                self.sampler,
                self.power_limit_w,
                window_s=self.guard_window_s,
                start_s=self.device.now_s(),
                events=self._events,
                batch_down=self._batch_down if switch else None,
            )
            # Energy of training only (module docstring): which of the three ways.
            self.use_counter = self.device.energy_j() is not None
            self.whole_window = not self.use_counter and self.device.is_simulated
            self._begin_span()
            if self.follower is not None:
                self.follower.start(self)
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
                if self.follower is not None:
                    self.follower.finish(self)
                else:
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
                self._note(
                    f"{self.device.name} is read-only here: {freq_mhz:g} MHz was chosen on a "
                    f"device with clock control; training at the clocks as found{now}"
                )
            return found
        self.clocks = LOCKED
        return float(self.device.set_freq_mhz(freq_mhz))

    def _note(self, line: str) -> None:
        self.notes.append(line)
        print(f"note: {line}", file=sys.stderr, flush=True)

    def _batch_down(self) -> Optional[Tuple[int, int]]:
        """The guard's read-only step (guard.py): the next smaller batch size from the
        next step on, in a segment of its own; None when none is left."""
        b = int(self.batch_size or 0)
        smaller = next_smaller_batch_size(self.batch_ladder, b)
        if smaller is None:
            return None
        if self.follower is not None and self.follower.config is not None:
            config = dataclasses.replace(self.follower.config, batch_size=smaller)
            self.follower.switched(self, config)
        else:
            self.log.close(self)
            self.log.open(self, self.power_limit_w, smaller, self.freq_start)
        self._switch(smaller)
        return b, smaller

    def _switch(self, batch_size: int) -> None:
        """From the next step on, train with `batch_size`; the loop hears it once."""
        changed = batch_size != self.batch_size
        self.batch_size = batch_size
        if changed and self.on_switch is not None:
            self.on_switch(batch_size)

    def segment_state(self) -> Optional[Dict[str, Any]]:
        """A fixed cap's segments for a checkpoint (a follower saves its own)."""
        return None if self.follower is not None else self.log.state(self)

    def segments(self) -> Tuple[Dict[str, Any], ...]:
        """The result's segments: the follower's, or a fixed cap's once the batch size
        changed (a run that never switched has none)."""
        segs = tuple(self.log.segments)
        return segs if self.follower is not None or len(segs) > 1 else ()

    # --- spans of training work -----------------------------------------------------
    def _sync(self) -> None:
        if self.cuda_sync is not None:
            self.cuda_sync()
        self.device.synchronize()

    def _begin_span(self) -> None:
        self._sync()
        self._t_last = self.device.now_s()
        self._e_last = self.device.energy_j() if self.use_counter else None
        self._span_s = 0.0

    def _close_span(self) -> None:
        """Charge the energy of the span that just ended (sampler-based devices)."""
        if not self.use_counter and not self.whole_window and self._span_s > 0:
            mean_w = self.sampler.window_mean_w(self._span_s)
            if mean_w is not None and math.isfinite(mean_w):
                self.acc.energy_j += mean_w * self._span_s
        self._span_s = 0.0

    def pause(self) -> None:
        """Stop charging: what follows (evaluation, checkpoints) is not training."""
        self._close_span()

    def resume(self) -> None:
        """Charge again from now on."""
        self._begin_span()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Work inside the block (evaluation, checkpoints) is not charged to training."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def step(self, samples: int) -> None:
        """Account one optimizer step that trained on `samples` samples."""
        if self.workload is not None:
            self.device.account_step(self.workload, samples)
        self._sync()
        t = self.device.now_s()
        dt = max(t - self._t_last, 0.0)
        self._t_last = t
        self.last_step_s = dt
        self._span_s += dt
        self.acc.train_time_s += dt
        if self.use_counter:
            e = self.device.energy_j()
            if e is not None and self._e_last is not None:
                self.acc.energy_j += max(e - self._e_last, 0.0)
            self._e_last = e
        self.samples += samples
        self.guard.check(t, self.acc.train_time_s, self.samples)
        if self.follower is not None:
            self.follower.after_step(self, samples)

    def add_eval(self, n_items: int, batch_size: int, wall_s: float) -> float:
        """Count an evaluation of `n_items` (batches of `batch_size`) that took `wall_s`
        on the host: its device time is a simulated device's model of the forward pass
        (devices/simulated/model.eval_pass_s), else the wall time (the GPU did it).
        Returns the seconds counted."""
        model = getattr(self.device, "eval_time_s", None) if self.workload else None
        spent = wall_s if model is None else float(model(self.workload, n_items, batch_size))
        self.acc.eval_time_s += spent
        return spent

    # --- a cap that changes (follow.py calls these) -----------------------------------
    @property
    def schedule_s(self) -> float:
        """The schedule's clock: training plus waiting for power (schedule.py)."""
        return self.acc.train_time_s + self.acc.pause_time_s

    def energy_so_far_j(self) -> float:
        """Energy of the run so far (the whole-window integral on simulated devices)."""
        extra = self.sampler.stats().energy_j if self.whole_window else 0.0
        return self.acc.energy_j + extra

    def apply(self, config: OperatingPoint, limit_w: Optional[float]) -> None:
        """Run at `config` under `limit_w` from now on: re-lock, re-target the guard."""
        if self._control and config.freq_mhz != self.freq_requested:
            self._lock(config.freq_mhz, True)
        self.freq_requested = config.freq_mhz
        self._switch(config.batch_size)
        self.power_limit_w = limit_w
        self.guard.retarget(limit_w, self.device.now_s())
        self._events_from = len(self.guard.events)
        self._begin_span()

    def reselect(self, config: OperatingPoint) -> None:
        """Another (b, f) under the same cap (the online rule, train/online.py): a segment
        of its own as a cap-driven switch has, then `apply` (re-lock, tell the loop)."""
        if self.follower is not None and self.follower.config is not None:
            self.follower.switched(self, config)
        else:
            self.log.close(self)
            self.log.open(self, self.power_limit_w, config.batch_size, config.freq_mhz)
        self.apply(config, self.power_limit_w)

    def wait_for_power(self, seconds: float, wall: bool = False) -> None:
        """Pause training for `seconds` of schedule time: clocks at their minimum (the
        least the idle GPU can draw), the time counted as paused, not training. `wall`:
        the seconds also pass on the host's clock, asleep (a live source is rewritten in
        real time, even when a simulated device's clock would jump ahead)."""
        self._close_span()
        if self._control:
            self.device.set_freq_mhz(min(self.device.available_freqs_mhz()))
            self.freq_requested = None
            self._events_from = len(self.guard.events)
        e0 = self.device.energy_j() if self.use_counter else None
        t0, wall_t0 = self.device.now_s(), time.monotonic()
        self.device.wait_s(seconds)
        if wall:  # a real device slept already; a simulated one only moved its clock
            time.sleep(max(0.0, seconds - (time.monotonic() - wall_t0)))
        self.acc.pause_time_s += max(seconds, 0.0)
        if e0 is not None:
            e1 = self.device.energy_j()
            self.acc.energy_j += 0.0 if e1 is None else max(e1 - e0, 0.0)
        elif not self.whole_window:
            mean_w = self.sampler.window_mean_w(self.device.now_s() - t0)
            self.acc.energy_j += mean_w * seconds if math.isfinite(mean_w) else 0.0
        self._begin_span()

    # --- what happened ----------------------------------------------------------------
    def snapshot(self) -> Dict[str, Any]:
        """The accounts with this process's power peaks (and whole-window energy)."""
        stats = self.sampler.stats()
        self._seg_peak_w = max(self._seg_peak_w, float(stats.peak_w))
        self._seg_max_raw_w = max(self._seg_max_raw_w, float(stats.max_raw_w))
        acc = self.acc.to_dict()
        if self.whole_window:
            acc["energy_j"] += float(stats.energy_j)
        acc["peak_w"] = max(acc["peak_w"], self._seg_peak_w)
        acc["max_raw_w"] = max(acc["max_raw_w"], self._seg_max_raw_w)
        acc["exceeded_windows"] = self.acc.exceeded_windows + self.guard.exceeded_windows
        return acc

    def locked_mhz(self) -> Optional[float]:
        """The clock the run holds now: the guard's last step-down since the current
        configuration was applied, else the one locked for it (not a read-back, which a
        thermal cap may lower)."""
        events = self.guard.events[self._events_from :]
        downs = [e.to_mhz for e in events if e.action == STEP_DOWN]
        return downs[-1] if downs else self.freq_requested

    @property
    def energy_source(self) -> str:
        return "counter" if self.use_counter else "sampler"
