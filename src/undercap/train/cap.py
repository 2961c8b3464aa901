"""The power cap a run is held to, as one value: a fixed limit (`FixedCap`) or one
that changes during training (schedule.PowerSchedule, schedule.LiveSource), behind
one interface (`Cap`). It is built once where a run is asked for (`cap_from`: the
CLI's --power-limit / --power-schedule / --power-source, `RunConfig.cap`) and handed
whole to selection (the limit it selects for) and training (the guard's limit, or the
follower that re-selects at every change: follow.py).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

from undercap import defaults
from undercap._compat import Protocol
from undercap.errors import UndercapError
from undercap.select.core import check_power_limit_w
from undercap.train.schedule import LiveSource, load_schedule


class Cap(Protocol):
    """What a run's power cap answers: the limit in W at a time on the schedule's clock
    (None: no cap), when it next changes, and where it came from."""

    source: str

    def limit_at(self, t_s: float) -> Optional[float]: ...

    def next_change_after(self, t_s: float) -> Optional[float]: ...

    @property
    def lowest_w(self) -> Optional[float]: ...


@dataclass(frozen=True)
class FixedCap:
    """A limit that holds for the whole run (None: no cap), checked when it is made."""

    limit_w: Optional[float] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "limit_w", check_power_limit_w(self.limit_w))

    @property
    def source(self) -> str:
        return "none" if self.limit_w is None else f"{self.limit_w:g} W"

    def limit_at(self, t_s: float) -> Optional[float]:
        return self.limit_w

    def next_change_after(self, t_s: float) -> Optional[float]:
        return None

    @property
    def lowest_w(self) -> Optional[float]:
        return self.limit_w


NO_CAP = FixedCap(None)


def cap_notes(cap: Cap) -> List[str]:
    """What the cap had to say during the run (a live source that went unreadable)."""
    return list(getattr(cap, "notes", ()))


def changes(cap: Cap) -> bool:
    """Whether the cap may change during training (then a follower re-selects)."""
    return not isinstance(cap, FixedCap)


def fixed_limit_w(cap: Cap) -> Optional[float]:
    """A fixed cap's limit; None for no cap and for one that changes (the follower
    holds those, segment by segment)."""
    return cap.limit_w if isinstance(cap, FixedCap) else None


def cap_from(
    limit_w: Union[None, float, FixedCap] = None,
    schedule: Optional[Union[str, Path, Cap]] = None,
    source: Optional[Union[str, Path]] = None,
    poll_s: float = defaults.POWER_SOURCE_POLL_S,
    max_wait_s: float = defaults.MAX_POWER_WAIT_S,
) -> Cap:
    """The one cap of a run from its three ways of being given (at most one):
    a fixed limit (None: no cap), a schedule (a CSV path, or a schedule or live
    source already made: taken as it is) or a live source's file. A cap that changes
    stops the run after pausing `max_wait_s` for power."""
    given = sum(bool(x) or isinstance(x, FixedCap) for x in (limit_w, schedule, source))
    if given > 1:
        raise UndercapError(
            "give one of --power-limit, --power-schedule or --power-source, not several"
        )
    if isinstance(schedule, (str, Path)):
        return load_schedule(schedule, max_wait_s)
    if schedule is not None:
        return schedule
    if source is not None:
        return LiveSource(source, poll_s, max_wait_s)
    return limit_w if isinstance(limit_w, FixedCap) else FixedCap(limit_w)
