"""Following a cap that changes during training: what a Session does at every change.

At each change of the cap (train/schedule.py) the follower
* closes the current segment (start_s, end_s, power_limit_w, batch_size, freq_mhz,
  its robust peak power, energy and samples);
* re-selects (b, f) for the new cap from the same profile and r(b), given the
  progress so far (schedule.Reselector; the progress model is in schedule.py);
* re-locks the clock, hands the new limit to the power guard, and tells the loop the
  new batch size (the loop re-scales its learning rate by the same sqrt rule and
  keeps its optimizer state);
* when no configuration is feasible under the cap (an outage, a dip below the
  lowest feasible power), pauses: clocks at their minimum, nothing lost, until the
  schedule's next change (or, for a live source, the next poll) brings power back.
Its state goes into checkpoints, so a resumed run continues the schedule.
"""

import math
import sys
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Tuple

from undercap.errors import InfeasibleError, PowerWaitError
from undercap.train.cap import Cap
from undercap.train.schedule import (
    LiveSource,
    OperatingPoint,
    PowerSchedule,
    Reselector,
    progress_fraction,
)

_UNSET: Any = object()


class CapFollower:
    def __init__(
        self, cap: Cap, reselector: Reselector, saved: Optional[Dict[str, Any]] = None
    ) -> None:
        self.cap, self.reselector = cap, reselector
        s = saved or {}
        self.log = SegmentLog(s)
        self.samples_by_batch: Dict[int, int] = {
            int(k): int(v) for k, v in s.get("samples_by_batch", {}).items()
        }
        cfg = s.get("config")
        self.config: Optional[OperatingPoint] = None if cfg is None else OperatingPoint(**cfg)
        self.limit_w: Any = s.get("limit_w", _UNSET)
        self._next_s: Optional[float] = None

    @property
    def segments(self) -> List[Dict[str, Any]]:
        return self.log.segments

    # --- the session's calls --------------------------------------------------------
    def start(self, session: Any) -> None:
        """At the start (or resumption) of a run: the cap now, and its configuration."""
        limit = self.cap.limit_at(session.schedule_s)
        if self.limit_w is not _UNSET and self._held_at_resume(session, limit):
            if self.config is None:  # checkpointed while waiting for power: wait again
                self._change(session, self.limit_w)
                return
            session.apply(self.config, self.limit_w)  # resumed: the configuration it held
            self._open(session)
            self.log.continue_saved(session)  # ... and the same segment, continued
            self._next_s = self.cap.next_change_after(session.schedule_s)
        else:
            self._change(session, limit)

    def _held_at_resume(self, session: Any, limit: Optional[float]) -> bool:
        """Whether a resumed run goes on with the saved configuration: the cap is the
        one it was chosen for, or the run had switched ahead of a falling cap (after_step)
        and the fall is still to come. Re-selecting for the old, higher cap there would
        train a step the uninterrupted run never took."""
        if limit == self.limit_w:
            return True
        upcoming = self.cap.next_change_after(session.schedule_s)
        return upcoming is not None and self.cap.limit_at(upcoming) == self.limit_w

    def after_step(self, session: Any, samples: int) -> None:
        if self.config is not None:
            b = self.config.batch_size
            self.samples_by_batch[b] = self.samples_by_batch.get(b, 0) + samples
        if self._next_s is None:
            return
        now = session.schedule_s
        if now + 1e-12 >= self._next_s:
            limit = self.cap.limit_at(now)
            if limit != self.limit_w:
                self._change(session, limit)
            else:
                self._next_s = self.cap.next_change_after(now)
        elif now + session.last_step_s > self._next_s:
            # The next step would end after the cap changes. When it falls, switch now:
            # a step already running at the old configuration would be over the new cap.
            upcoming = self.cap.limit_at(self._next_s)
            if upcoming is not None and (self.limit_w is None or upcoming < self.limit_w):
                self._change(session, upcoming)

    def finish(self, session: Any) -> None:
        self.log.close(session)

    def switched(self, session: Any, config: OperatingPoint) -> None:
        """The session changed the batch size under the same cap (a read-only device
        over its cap, session.py): a new segment, the configuration a resume holds."""
        self.log.close(session)
        self.config = config
        self._open(session)

    def state(self, session: Any = None) -> Dict[str, Any]:
        return {
            **self.log.state(session),
            "samples_by_batch": {str(b): s for b, s in self.samples_by_batch.items()},
            "config": None if self.config is None else asdict(self.config),
            "limit_w": None if self.limit_w is _UNSET else self.limit_w,
        }

    # --- changes ----------------------------------------------------------------------
    def progress(self) -> float:
        r = self.reselector
        if not r.n_max:
            return 0.0
        return progress_fraction(self.samples_by_batch, r.relative, r.n_max)

    def _change(self, session: Any, limit: Optional[float]) -> None:
        self.log.close(session)
        cfg = self._choose(session, limit)
        if cfg is None:  # no power for any configuration: wait for it
            limit, cfg = self._wait(session, limit)
        self.config, self.limit_w = cfg, limit
        session.apply(cfg, limit)
        self._open(session)
        self._next_s = self.cap.next_change_after(session.schedule_s)

    def _choose(self, session: Any, limit: Optional[float]) -> Optional[OperatingPoint]:
        return self.reselector.choose(limit, self.progress(), session.energy_so_far_j())

    def _wait(self, session: Any, limit: Optional[float]) -> Tuple[Optional[float], OperatingPoint]:
        """Pause (clocks at their minimum, one segment per limit) until the cap lets a
        configuration run: a schedule's next rise, a live source's next poll that says
        so. The wait sleeps (no busy loop); past the cap's `max_wait_s` the run stops
        with PowerWaitError (exit 4: the runner checkpoints first, and the configuration
        is cleared so that a resumed run selects again)."""
        self.config, waited = None, 0.0
        self._say_waiting(session, limit)
        while True:
            self.limit_w = limit
            self._open(session, paused=True)
            seconds = self._until_power_s(session, limit, waited)
            session.wait_for_power(seconds, wall=isinstance(self.cap, LiveSource))
            waited += seconds
            self.log.close(session)
            limit = self.cap.limit_at(session.schedule_s)
            cfg = self._choose(session, limit)
            if cfg is not None:
                say(f"power is back: the cap is {_w(limit)} after waiting {waited:g} s")
                return limit, cfg

    def _until_power_s(self, session: Any, limit: Optional[float], waited: float) -> float:
        """How long to wait before looking again: to a schedule's next rise, a live
        source's next poll; PowerWaitError (or InfeasibleError: never) past the bound."""
        now, bound = session.schedule_s, getattr(self.cap, "max_wait_s", math.inf)
        until = self.cap.next_change_after(now)
        if isinstance(self.cap, PowerSchedule):  # paused ahead of the fall: skip it
            while until is not None and self.cap.limit_at(until) == limit:
                until = self.cap.next_change_after(until)
        if until is None:
            raise InfeasibleError(
                f"the power cap ({_w(limit)}) allows no configuration from {now:.0f} s on "
                f"and the schedule {self.cap.source} never raises it again: training "
                "cannot finish"
            )
        if waited + (until - now) <= bound + 1e-9:
            return until - now
        if isinstance(self.cap, LiveSource):
            raise PowerWaitError(
                f"waited {waited:g} s for power: the cap {self.cap.source} still says "
                f"{_w(limit)}, under which no configuration runs (--max-wait-s {bound:g} s)"
            )
        raise PowerWaitError(
            f"the cap {self.cap.source} is {_w(limit)} at {now:.3g} s, under which no "
            f"configuration runs, until {until:g} s: a wait of {waited + until - now:g} s, "
            f"beyond --max-wait-s {bound:g} s"
        )

    def _say_waiting(self, session: Any, limit: Optional[float]) -> None:
        lowest = self.reselector.lowest_feasible_w()
        need = "" if lowest is None else f" (the lowest needs {lowest:.2f} W)"
        how = (
            f"reading {self.cap.source} every {self.cap.poll_s:g} s"
            if isinstance(self.cap, LiveSource)
            else f"following {self.cap.source}"
        )
        bound = getattr(self.cap, "max_wait_s", math.inf)
        say(
            f"waiting for power at {session.schedule_s:.3g} s: the cap is {_w(limit)}, under "
            f"which no configuration runs{need}; {how}, for at most {bound:g} s (--max-wait-s)"
        )

    def _open(self, session: Any, paused: bool = False) -> None:
        cfg = None if paused else self.config
        self.log.open(
            session,
            self.limit_w,
            None if cfg is None else cfg.batch_size,
            None if cfg is None else cfg.freq_mhz,
        )


def _w(limit: Optional[float]) -> str:
    return "none" if limit is None else f"{limit:g} W"


def say(line: str) -> None:
    """A line on stderr about the cap while training runs (beside the progress bar)."""
    print(line, file=sys.stderr, flush=True)


class SegmentLog:
    """The run's segments, one per interval with one configuration and cap: start_s,
    end_s, power_limit_w, batch_size, freq_mhz, its robust peak power, mean power,
    energy and samples. The open one survives a checkpoint (`state`), and a resumed
    run continues it (`continue_saved`)."""

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
            "start_s": seg["start_s"],
            "power_limit_w": seg["power_limit_w"],
            "batch_size": seg["batch_size"],
            "freq_mhz": seg["freq_mhz"],
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
