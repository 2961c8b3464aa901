"""The power cap a run is held to, as one value from the flag to the guard: a fixed
limit (`FixedCap`), a schedule (`PowerSchedule`, `--power-schedule`: CSV
`time_s,power_limit_w`) or a live source (`LiveSource`, `--power-source`: a file another
program rewrites), behind one interface (`Cap`; formats: docs/guides/changing-caps.md).
`cap_from` makes it once; it is read as a number only where one is compared:
Algorithm 1's feasibility test (select/core.py) and the guard (session/guard.py).
Beyond the paper: its Sec. 6 names a constant cap as its limitation.

The schedule clock is the training time plus the time paused for lack of power,
evaluation excluded, so it survives a checkpoint and a resumed run continues the
schedule where it stopped. Where a changing cap leaves nothing feasible, the run
pauses (session/follow.py), at most `max_wait_s` at a time.
"""

import bisect
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

from undercap import defaults
from undercap._compat import Protocol
from undercap.artifacts.io import read_text
from undercap.errors import ArtifactError, UndercapError
from undercap.select.core import check_power_limit_w


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


def changes(cap: Cap) -> bool:
    """Whether the cap may change during training (then a follower re-selects)."""
    return not isinstance(cap, FixedCap)


def fixed_limit_w(cap: Cap) -> Optional[float]:
    """A fixed cap's limit; None for no cap and for one that changes (the follower
    holds those, segment by segment)."""
    return cap.limit_w if isinstance(cap, FixedCap) else None


CSV_COLUMNS = ("time_s", "power_limit_w")


@dataclass(frozen=True)
class PowerSchedule:
    """A piecewise-constant cap: (time_s, power_limit_w or None for no cap) rows."""

    times_s: Tuple[float, ...]
    limits_w: Tuple[Optional[float], ...]
    source: str = "<schedule>"
    period_s: Optional[float] = None  # repeats every period_s (None: the last row holds)
    # a pause longer than this (no configuration fits until the cap rises) stops the run
    max_wait_s: float = defaults.MAX_POWER_WAIT_S

    def limit_at(self, t_s: float) -> Optional[float]:
        """The limit in force at schedule time `t_s` (the first row's before it)."""
        if self.period_s:
            t_s = t_s % self.period_s
        i = bisect.bisect_right(self.times_s, t_s + 1e-12) - 1  # the last row at or before
        return self.limits_w[max(0, i)]

    def next_change_after(self, t_s: float) -> Optional[float]:
        """When the limit next changes after `t_s` (None: never)."""
        current = self.limit_at(t_s)
        cycles = [0.0]
        if self.period_s:  # this cycle's rows, then the next cycle's
            start = t_s - t_s % self.period_s
            cycles = [start, start + self.period_s]
        for offset in cycles:
            for t, lim in zip(self.times_s, self.limits_w):
                if t + offset > t_s + 1e-12 and lim != current:
                    return t + offset
        return None

    @property
    def lowest_w(self) -> Optional[float]:
        """The lowest cap the schedule sets (None: it never caps)."""
        finite = [x for x in self.limits_w if x is not None]
        return min(finite) if finite else None

    def to_csv(self) -> str:
        lines = [",".join(CSV_COLUMNS)]
        lines += [
            f"{t:g},{'none' if w is None else f'{w:g}'}"
            for t, w in zip(self.times_s, self.limits_w)
        ]
        if self.period_s:
            lines.append(f"{self.period_s:g},repeat")
        return "\n".join(lines) + "\n"


def load_schedule(
    path: Union[str, Path], max_wait_s: float = defaults.MAX_POWER_WAIT_S
) -> PowerSchedule:
    """Read and check a schedule CSV; every problem is one ArtifactError line."""
    path = Path(path)
    text = read_text(path, what="power schedule")
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or any(c not in (rows[0] or {}) for c in CSV_COLUMNS):
        raise ArtifactError(
            f"power schedule {path}: expected a CSV with the columns time_s,power_limit_w "
            "and at least one row"
        )
    period = None
    if len(rows) > 1 and (rows[-1]["power_limit_w"] or "").strip().lower() == "repeat":
        period = _number(rows.pop()["time_s"], path, len(rows) + 2, "time_s")
    times, limits = [], []
    for i, row in enumerate(rows, start=2):
        times.append(_number(row["time_s"], path, i, "time_s"))
        limits.append(_limit(row["power_limit_w"], path, i))
    if times[0] < 0 or any(b <= a for a, b in zip(times, times[1:])):
        raise ArtifactError(f"power schedule {path}: time_s must start at >= 0 and increase")
    if period is not None and period <= times[-1]:
        raise ArtifactError(f"power schedule {path}: the repeat period must follow the last row")
    return PowerSchedule(tuple(times), tuple(limits), str(path), period, max_wait_s)


def _number(text: Optional[str], path: Path, line: int, what: str) -> float:
    try:
        x = float((text or "").strip())
    except ValueError as e:
        raise ArtifactError(
            f"power schedule {path}, line {line}: {what} {text!r} is not a number"
        ) from e
    if not math.isfinite(x):
        raise ArtifactError(f"power schedule {path}, line {line}: {what} must be finite")
    return x


def _limit(text: Optional[str], path: Path, line: int) -> Optional[float]:
    if (text or "").strip().lower() in ("", "none", "inf"):
        return None
    x = _number(text, path, line, "power_limit_w")
    if x < 0:
        raise ArtifactError(f"power schedule {path}, line {line}: power_limit_w must be >= 0 W")
    return x


class LiveSource:
    """The limit in a file another program rewrites (W, or `none`), read at most every
    `poll_s` of schedule time. Unreadable at the start it is an ArtifactError (a cap
    that cannot be read is never "no cap"); later, a bad file keeps the last limit
    read, with a warning line (in `notes`, for the result) each time it goes bad."""

    def __init__(
        self, path: Union[str, Path], poll_s: float, max_wait_s: float = defaults.MAX_POWER_WAIT_S
    ) -> None:
        self.path, self.poll_s, self.max_wait_s = Path(path), float(poll_s), float(max_wait_s)
        self.source = str(path)
        self.notes: List[str] = []
        self._last_read_s: Optional[float] = None
        self._failing = False
        self._limit = read_live_limit(self.path)

    def _read(self) -> Optional[float]:
        try:
            limit = read_live_limit(self.path)
        except ArtifactError as e:
            if not self._failing:
                held = "none" if self._limit is None else f"{self._limit:g} W"
                self.notes.append(f"{e}; holding the last limit read ({held})")
                print(f"warning: {self.notes[-1]}", file=sys.stderr, flush=True)
            self._failing = True
            return self._limit
        self._failing = False
        return limit

    def limit_at(self, t_s: float) -> Optional[float]:
        if self._last_read_s is None or t_s - self._last_read_s >= self.poll_s:
            self._limit, self._last_read_s = self._read(), t_s
        return self._limit

    def next_change_after(self, t_s: float) -> Optional[float]:
        return t_s + self.poll_s  # unknown: look again after one poll

    @property
    def lowest_w(self) -> Optional[float]:
        return self._limit


def read_live_limit(path: Path) -> Optional[float]:
    """A live source's limit: one number of watts >= 0, or `none` (no cap)."""
    text = read_text(path, what="power source").strip()
    if text.lower() in ("none", "inf"):
        return None
    try:
        limit = float(text)
    except ValueError:
        limit = float("nan")
    if not math.isfinite(limit) or limit < 0:
        shown = text if len(text) <= 20 else text[:20] + "..."
        raise ArtifactError(
            f"power source {path} holds {shown!r}, not a limit in W (a number >= 0, or none)"
        )
    return limit


def cap_from(
    limit_w: Union[None, float, FixedCap] = None,
    schedule: Optional[Union[str, Path, Cap]] = None,
    source: Optional[Union[str, Path]] = None,
    poll_s: float = defaults.POWER_SOURCE_POLL_S,
    max_wait_s: float = defaults.MAX_POWER_WAIT_S,
) -> Cap:
    """The one cap of a run from its three ways of being given (at most one): a fixed
    limit (None: no cap), a schedule (a CSV path, or a cap already made) or a live
    source's file; one that changes stops the run after pausing `max_wait_s` for power."""
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
