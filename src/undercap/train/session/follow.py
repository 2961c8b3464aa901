"""Following a cap that changes during training: what to train at after each change.

The follower decides; the session (session/__init__.py) applies. At each change of the
cap it re-selects (b, f) from the same profile and r(b) (`Reselector`), given the
progress so far, as a `Change`, or a pause where nothing is feasible, asked again
(`after_wait`) up to the cap's `max_wait_s` (PowerWaitError: exit 4). Its state goes
into checkpoints, so a resumed run continues the schedule.

Progress (docs/guides/changing-caps.md): a sample trained at batch size b does
1 / N(b) of the work (as in McCandlish et al. 2018's steps/samples trade-off), so the
fraction done is p = sum_i s_i / N(b_i), kept in units of N(b_max) through r(b). The
common factor (1 - p) leaves re-selecting for time Algorithm 1 at the new cap, but
changes what an energy budget still allows.
"""

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, Mapping, Optional

from undercap.artifacts.profile import as_profile
from undercap.errors import ArtifactError, InfeasibleError, PowerWaitError, UndercapError
from undercap.select.core import lowest_feasible_power_w
from undercap.select.objectives import choose
from undercap.train.cap import Cap, LiveSource, PowerSchedule, changes

_UNSET: Any = object()


def progress_fraction(
    samples_by_batch: Dict[int, int], relative: Dict[int, float], n_max: float
) -> float:
    """p = sum_b s_b / (r(b) N(b_max)): the fraction of the way to the target done
    (module docstring); 1.0 or more means the model predicts the target is reached."""
    return sum(s / (relative[b] * n_max) for b, s in samples_by_batch.items() if s)


@dataclass(frozen=True)
class OperatingPoint:
    """A (b, f) pair a run trains at between two changes of the cap, with the peak
    power its profile row gave and the safety margin its feasibility used."""

    batch_size: int
    freq_mhz: float
    peak_power_w: float  # the profile's, for the record
    margin_w: float = 0.0  # the safety margin its feasibility used: needs peak + margin


@dataclass(frozen=True)
class Change:
    """Train at `point` under `limit_w` from the next step, or (no point) pause `wait_s`
    of the schedule's clock (and the host's where `wall`) and ask again. `held`: a
    resumed run's configuration, as checkpointed; `note`: a line to show the user."""

    limit_w: Optional[float]
    point: Optional[OperatingPoint] = None
    wait_s: float = 0.0
    wall: bool = False
    held: bool = False
    note: str = ""


class Reselector:
    """Picks (b, f) for a new cap from the profile and r(b) (select/objectives.py), the
    objective and what is left of an energy budget; None means no configuration is
    feasible under the cap: pause until power returns."""

    def __init__(
        self,
        profile: Any,
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
            runs = any(  # some configuration runs under the cap at all
                r.batch_size in self.relative and (limit_w is None or r.peak_power_w <= limit_w)
                for r in self.profile.rows
            )
            if budget is None or not runs:
                return None
            # the budget cannot cover what is left: spend as little as possible
            c = choose(self.profile, self.relative, limit_w, objective="energy")  # type: ignore[arg-type]
        return OperatingPoint(c.batch_size, c.freq_mhz, c.peak_power_w, c.power_margin_w or 0.0)

    def lowest_feasible_w(self) -> Optional[float]:
        """The lowest cap some configuration runs under (its peak plus margin)."""
        try:
            return lowest_feasible_power_w(self.profile, self.relative)
        except ArtifactError:
            return None


def reselector_for(
    profile: Any,
    efficiency: Any,
    *,
    objective: str = "time",
    energy_budget_j: Optional[float] = None,
) -> Reselector:
    """A Reselector on the profile and the efficiency estimate's r(b) and N(b_max)."""
    return Reselector(
        profile,
        efficiency.relative,
        objective=objective,
        energy_budget_j=energy_budget_j,
        n_max=efficiency.samples_bmax,
    )


def reselector_from(
    cap: Cap, profile: Any, relative: Any, objective: Mapping[str, Any], precision: str = "fp32"
) -> Optional[Reselector]:
    """What re-selects (b, f) at every change of a cap that changes (None: a fixed one),
    in the run's `precision` (the profile's rows in it)."""
    if not changes(cap):
        return None
    if profile is None or relative is None:
        raise UndercapError("a power schedule needs profile= and relative= to re-select")
    return Reselector(
        as_profile(profile).in_precision(precision),
        dict(relative),
        objective=objective.get("objective", "time"),
        energy_budget_j=objective.get("energy_budget_j"),
        n_max=objective.get("samples_bmax"),
    )


class CapFollower:
    """The decisions of one run under a cap that changes (module docstring), asked by
    the session at `start`, `after_step` and `after_wait`, and told what it `switched`."""

    def __init__(
        self, cap: Cap, reselector: Reselector, saved: Optional[Dict[str, Any]] = None
    ) -> None:
        self.cap, self.reselector = cap, reselector
        s = saved or {}
        self.samples_by_batch: Dict[int, int] = {
            int(k): int(v) for k, v in s.get("samples_by_batch", {}).items()
        }
        cfg = s.get("config")
        self.config: Optional[OperatingPoint] = None if cfg is None else OperatingPoint(**cfg)
        self.limit_w: Any = s.get("limit_w", _UNSET)
        self._next_s: Optional[float] = None
        self._waited_s = 0.0  # the pause in progress, so far

    def start(self, now_s: float, energy_j: float) -> Change:
        """The cap at the start (or resumption) of a run, and its configuration."""
        limit = self.cap.limit_at(now_s)
        if self.limit_w is not _UNSET and self._held_at_resume(now_s, limit):
            if self.config is None:  # checkpointed while waiting for power: wait again
                return self._change(now_s, self.limit_w, energy_j)
            self._next_s = self.cap.next_change_after(now_s)
            return Change(self.limit_w, self.config, held=True)  # the configuration it held
        return self._change(now_s, limit, energy_j)

    def _held_at_resume(self, now_s: float, limit: Optional[float]) -> bool:
        """Whether a resumed run goes on as checkpointed: the cap is the one it was chosen
        for, or it had switched ahead of a falling cap (after_step) that is still to fall
        (re-selecting for the higher cap would train a step the run never took)."""
        if limit == self.limit_w:
            return True
        upcoming = self.cap.next_change_after(now_s)
        return upcoming is not None and self.cap.limit_at(upcoming) == self.limit_w

    def after_step(
        self, now_s: float, step_s: float, samples: int, energy_j: float
    ) -> Optional[Change]:
        """A step of `samples` ended at `now_s` (it took `step_s`): a Change when the cap
        changed, or is about to fall within the next step (then switch now: a step
        already running at the old configuration would be over the new cap)."""
        if self.config is not None:
            b = self.config.batch_size
            self.samples_by_batch[b] = self.samples_by_batch.get(b, 0) + samples
        if self._next_s is None:
            return None
        if now_s + 1e-12 >= self._next_s:
            limit = self.cap.limit_at(now_s)
            if limit != self.limit_w:
                return self._change(now_s, limit, energy_j)
            self._next_s = self.cap.next_change_after(now_s)
        elif now_s + step_s > self._next_s:
            upcoming = self.cap.limit_at(self._next_s)
            if upcoming is not None and (self.limit_w is None or upcoming < self.limit_w):
                return self._change(now_s, upcoming, energy_j)
        return None

    def after_wait(self, now_s: float, energy_j: float) -> Change:
        """After a pause: the configuration the cap now allows, or another pause."""
        return self._change(now_s, self.cap.limit_at(now_s), energy_j)

    def switched(self, batch_size: int) -> None:
        """The guard stepped the batch size down under the same cap (read-only clocks):
        the configuration a resume holds."""
        if self.config is not None:
            self.config = replace(self.config, batch_size=batch_size)

    def state(self) -> Dict[str, Any]:
        return {
            "samples_by_batch": {str(b): s for b, s in self.samples_by_batch.items()},
            "config": None if self.config is None else asdict(self.config),
            "limit_w": None if self.limit_w is _UNSET else self.limit_w,
        }

    def progress(self) -> float:
        r = self.reselector
        return progress_fraction(self.samples_by_batch, r.relative, r.n_max) if r.n_max else 0.0

    # --- changes ----------------------------------------------------------------------
    def _change(self, now_s: float, limit: Optional[float], energy_j: float) -> Change:
        cfg = self.reselector.choose(limit, self.progress(), energy_j)
        if cfg is None:  # no power for any configuration: wait for it
            return self._pause(now_s, limit)
        waited, self._waited_s = self._waited_s, 0.0
        self.config, self.limit_w = cfg, limit
        self._next_s = self.cap.next_change_after(now_s)
        back = f"power is back: the cap is {_w(limit)} after waiting {waited:g} s"
        return Change(limit, cfg, note=back if waited else "")

    def _pause(self, now_s: float, limit: Optional[float]) -> Change:
        """A pause until the cap next rises (a schedule) or the next poll (a live
        source); the configuration is cleared first, so a run stopped here (the bound)
        and resumed selects again."""
        first = self._waited_s == 0.0
        self.config, self.limit_w = None, limit
        seconds = self._until_power_s(now_s, limit)
        self._waited_s += seconds
        note = self._waiting_line(now_s, limit) if first else ""
        return Change(limit, None, seconds, isinstance(self.cap, LiveSource), note=note)

    def _until_power_s(self, now_s: float, limit: Optional[float]) -> float:
        """How long to wait before looking again: to a schedule's next rise, a live
        source's next poll; PowerWaitError past the cap's bound (InfeasibleError: never)."""
        bound = getattr(self.cap, "max_wait_s", math.inf)
        until = self.cap.next_change_after(now_s)
        if isinstance(self.cap, PowerSchedule):  # paused ahead of the fall: skip it
            while until is not None and self.cap.limit_at(until) == limit:
                until = self.cap.next_change_after(until)
        if until is None:
            raise InfeasibleError(
                f"the power cap ({_w(limit)}) allows no configuration from {now_s:.0f} s on "
                f"and the schedule {self.cap.source} never raises it again: training "
                "cannot finish"
            )
        if self._waited_s + (until - now_s) <= bound + 1e-9:
            return until - now_s
        if isinstance(self.cap, LiveSource):
            raise PowerWaitError(
                f"waited {self._waited_s:g} s for power: the cap {self.cap.source} still "
                f"says {_w(limit)}, under which no configuration runs (--max-wait-s {bound:g} s)"
            )
        raise PowerWaitError(
            f"the cap {self.cap.source} is {_w(limit)} at {now_s:.3g} s, under which no "
            f"configuration runs, until {until:g} s: a wait of "
            f"{self._waited_s + until - now_s:g} s, beyond --max-wait-s {bound:g} s"
        )

    def _waiting_line(self, now_s: float, limit: Optional[float]) -> str:
        lowest = self.reselector.lowest_feasible_w()
        need = "" if lowest is None else f" (the lowest needs {lowest:.2f} W)"
        how = (
            f"reading {self.cap.source} every {self.cap.poll_s:g} s"
            if isinstance(self.cap, LiveSource)
            else f"following {self.cap.source}"
        )
        bound = getattr(self.cap, "max_wait_s", math.inf)
        return (
            f"waiting for power at {now_s:.3g} s: the cap is {_w(limit)}, under which no "
            f"configuration runs{need}; {how}, for at most {bound:g} s (--max-wait-s)"
        )


def _w(limit: Optional[float]) -> str:
    return "none" if limit is None else f"{limit:g} W"
