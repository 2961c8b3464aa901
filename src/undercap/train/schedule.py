"""Power caps that change during training (beyond the paper: its Sec. 6 names a constant
cap as its limitation), and the progress model used when the batch size changes.

A cap comes from a schedule file (`--power-schedule`, CSV `time_s,power_limit_w`: the
limit of each row holds until the next row, times on the device's clock from the
start of training; an empty or `none` limit means no cap, 0 W means no power) or a
live source (`--power-source`, a file another program rewrites with the current
limit, e.g. from a solar charge controller, read again every `poll_s` seconds). A
last row `PERIOD,repeat` makes a schedule repeat every PERIOD seconds (day after day).

The schedule clock is the training time plus the time paused for lack of power
(evaluation excluded). On a simulated device that is exactly its virtual clock; on
real hardware it leaves out evaluation, so the clock survives a checkpoint and a
resumed run continues the schedule where it stopped.

Progress across batch sizes. N(b) samples reach the target at batch size b; with
r(b) = N(b) / N(b_max) only the ratios are known, and each sample trained at batch
size b is taken to do 1 / N(b) of the work (progress is linear in samples within a
batch size, as in McCandlish et al. 2018's steps/samples trade-off, where the
fraction of the optimisation done depends only on how far along it is). After
samples s_i at batch sizes b_i the fraction done is p = sum_i s_i / N(b_i), and at a
new batch size b the run still needs (1 - p) * N(b) samples. The fraction is kept
in units of N(b_max): p = sum_i s_i / (r(b_i) N(b_max)). Under this model the
remaining time at (b, f) is t(b, f) * (1 - p) * N(b): the common factor (1 - p)
does not change which configuration is fastest at the new cap, so re-selecting for
time is Algorithm 1 at the new cap; it does change what an energy budget still
allows (the remaining budget must cover the remaining work).
"""

import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from undercap import defaults
from undercap.artifacts.io import read_text
from undercap.errors import ArtifactError

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
        i = max(0, _last_at_or_before(self.times_s, t_s))
        return self.limits_w[i]

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


def _last_at_or_before(times: Tuple[float, ...], t: float) -> int:
    i = -1
    for k, x in enumerate(times):
        if x <= t + 1e-12:
            i = k
    return i


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
    """The limit in a file another program rewrites (one number in W, or `none`),
    read at most every `poll_s` of schedule time. It must be readable when the run
    starts (ArtifactError otherwise: a cap that cannot be read is never "no cap");
    later, a missing, unreadable or half-written file keeps the last limit read, with a
    warning line (in `notes`, for the result) each time the file goes bad."""

    def __init__(
        self,
        path: Union[str, Path],
        poll_s: float,
        max_wait_s: float = defaults.MAX_POWER_WAIT_S,
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
                self._note(f"{e}; holding the last limit read ({held})")
            self._failing = True
            return self._limit
        self._failing = False
        return limit

    def _note(self, line: str) -> None:
        self.notes.append(line)
        print(f"warning: {line}", file=sys.stderr, flush=True)

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


# --- progress across batch sizes --------------------------------------------------------
def progress_fraction(
    samples_by_batch: Dict[int, int], relative: Dict[int, float], n_max: float
) -> float:
    """p = sum_b s_b / (r(b) N(b_max)): the fraction of the way to the target done
    (module docstring); 1.0 or more means the model predicts the target is reached."""
    return sum(s / (relative[b] * n_max) for b, s in samples_by_batch.items() if s)


def remaining_samples(p: float, b: int, relative: Dict[int, float], n_max: float) -> float:
    """Samples still needed at batch size b after a fraction p of the work."""
    return max(0.0, 1.0 - p) * relative[b] * n_max


@dataclass(frozen=True)
class OperatingPoint:
    """A (b, f) pair a run trains at between two changes of the cap, with the peak
    power its profile row gave and the safety margin its feasibility used."""

    batch_size: int
    freq_mhz: float
    peak_power_w: float  # the profile's, for the record
    margin_w: float = 0.0  # the safety margin its feasibility used: needs peak + margin


class Reselector:
    """Picks (b, f) for a new cap from the profile and r(b) (select/objectives.py), the
    objective and what is left of an energy budget; None means no configuration is
    feasible under the cap: pause until power returns."""

    def __init__(
        self,
        profile: object,
        relative: Dict[int, float],
        *,
        objective: str = "time",
        energy_budget_j: Optional[float] = None,
        n_max: Optional[float] = None,
    ) -> None:
        self.profile, self.relative = profile, dict(relative)
        self.objective, self.energy_budget_j, self.n_max = objective, energy_budget_j, n_max

    def choose(
        self, limit_w: Optional[float], p: float = 0.0, energy_j: float = 0.0
    ) -> Optional[OperatingPoint]:
        from undercap.errors import InfeasibleError
        from undercap.select.objectives import choose

        if limit_w is not None and limit_w <= 0:
            return None
        budget, n_left = self.energy_budget_j, None
        if budget is not None and self.n_max:
            # the rest of the work must fit the rest of the budget (module docstring)
            budget, n_left = max(budget - energy_j, 1e-9), self.n_max * max(1.0 - p, 1e-9)
        try:
            c = choose(
                self.profile,
                self.relative,
                limit_w,
                objective=self.objective,  # type: ignore[arg-type]
                energy_budget_j=budget,
                samples_bmax=n_left,
            )
        except InfeasibleError:
            if budget is None or not self._any_feasible(limit_w):
                return None
            # the budget cannot cover what is left: spend as little as possible
            c = choose(self.profile, self.relative, limit_w, objective="energy")  # type: ignore[arg-type]
        return OperatingPoint(c.batch_size, c.freq_mhz, c.peak_power_w, c.power_margin_w or 0.0)

    def lowest_feasible_w(self) -> Optional[float]:
        """The lowest cap some configuration runs under (its peak plus margin)."""
        from undercap.errors import ArtifactError
        from undercap.select.core import lowest_feasible_power_w

        try:
            return lowest_feasible_power_w(self.profile, self.relative)  # type: ignore[arg-type]
        except ArtifactError:
            return None

    def _any_feasible(self, limit_w: Optional[float]) -> bool:
        rows = self.profile.rows  # type: ignore[attr-defined]
        return any(
            r.batch_size in self.relative and (limit_w is None or r.peak_power_w <= limit_w)
            for r in rows
        )


def reselector_for(
    profile: object,
    efficiency: object,
    *,
    objective: str = "time",
    energy_budget_j: Optional[float] = None,
) -> Reselector:
    """What re-selects (b, f) at every change of a cap: a Reselector on the profile and
    the efficiency estimate's r(b) and N(b_max)."""
    return Reselector(
        profile,
        efficiency.relative,  # type: ignore[attr-defined]
        objective=objective,
        energy_budget_j=energy_budget_j,
        n_max=efficiency.samples_bmax,  # type: ignore[attr-defined]
    )
