"""The race on the target in your own loop: `capped(..., race=True)` and `cap.race()`.

    with undercap.capped(device, profile=p, proxies=rels, power_limit_w=3.5, race=True,
                         samples_bmax=n_max, model=model, input_shape=s, target_accuracy=0.9) as cap:
        forks = {}
        for lane in cap.race():            # one per candidate; none when there is no race
            net, opt = fork_of_the_starting_weights(), ...   # lr=cap.lr(base_lr)
            while not lane.over:           # its budget spent and evaluated, or the target
                ...train one batch of cap.batch_size...; cap.step(n)
                if evaluation_due:
                    with cap.paused():
                        cap.report(evaluate(net))
            forks[lane.batch_size] = (net, opt)
        net, opt = forks.get(cap.batch_size) or (...the starting model...)  # the winner's
        while not cap.done: ...train as usual...

Only your loop can fork your model, so the lanes are yours to train; the handle does
the rest as `undercap run --race` does (recipes/race.py): the plan (select/race.py),
each lane's clock locked and the cap held in the same session (Session.apply), its
curve from your report()s, the verdict, and the winner's configuration afterwards.
All lanes run on the one session, so the losers' device time and energy are in the
totals and the time to accuracy: the race is never free. `cap.result().race` keeps
the record (train/race.py's RaceRecord). A report that reaches the target in a lane
ends the race and the training (that lane has won).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from undercap.errors import UndercapError
from undercap.select.race import RacePlan
from undercap.train.race import Lane, RaceRecord, decide


@dataclass(frozen=True)
class _Config:  # what Session.apply takes
    batch_size: int
    freq_mhz: Optional[float]


class RaceLane:
    """One candidate being trained by your loop: its batch size and whether it is over."""

    def __init__(self, session: Any, candidate: Any, budget_s: float, target: float) -> None:
        self.session, self.batch_size, self.freq_mhz = (
            session,
            candidate.batch_size,
            candidate.freq_mhz,
        )
        self.budget_s, self.target = budget_s, target
        self.t0, self.n0 = session.acc.train_time_s, session.samples
        self.e0 = session.energy_so_far_j()
        self.curve: list[tuple[float, int, float]] = []
        self.reached = False

    @property
    def spent_s(self) -> float:
        return self.session.acc.train_time_s - self.t0

    @property
    def over(self) -> bool:
        """The target was reached, or the budget is spent and evaluated after that."""
        judged = bool(self.curve) and self.curve[-1][0] >= self.budget_s
        return self.reached or judged

    def report(self, accuracy: float) -> None:
        self.curve.append((self.spent_s, self.session.samples - self.n0, float(accuracy)))
        self.reached = self.reached or accuracy >= self.target

    def lane(self) -> Lane:
        acc = self.session.snapshot()  # peaks so far: the session's, an upper bound
        limit = self.session.power_limit_w
        return Lane(
            batch_size=self.batch_size,
            freq_mhz=self.freq_mhz,
            curve=tuple(self.curve),
            train_time_s=self.spent_s,
            energy_j=self.session.energy_so_far_j() - self.e0,
            samples=self.session.samples - self.n0,
            reached=self.reached,
            peak_power_w=float(acc["peak_w"]),
            limit_exceeded=limit is not None and float(acc["peak_w"]) > limit,
        )


class CappedRace:
    """Runs the plan's lanes in a Capped handle's session (module docstring)."""

    def __init__(self, session: Any, plan: RacePlan, target_accuracy: Optional[float]) -> None:
        if target_accuracy is None:
            raise UndercapError("capped(race=True) needs target_accuracy= to judge the race")
        self.session, self.plan, self.target = session, plan, float(target_accuracy)
        self.current: Optional[RaceLane] = None
        self.record: Optional[RaceRecord] = None

    def lanes(self, limit_w: Optional[float]) -> Iterator[RaceLane]:
        if not self.plan.needed or self.record is not None:
            return
        done: list[Lane] = []
        for c in self.plan.candidates:
            self.session.apply(_Config(c.batch_size, c.freq_mhz), limit_w)
            self.current = RaceLane(self.session, c, self.plan.budget_s, self.target)
            yield self.current
            done.append(self.current.lane())
            if self.current.reached:  # training is over: the ones after it never run
                break
        self.current = None
        self.record = decide(self.plan, done, self.target)
        w = self.record.winner
        self.session.apply(_Config(w["batch_size"], w["freq_mhz"]), limit_w)


def proxy_relatives(proxies: Any) -> dict[str, dict[int, float]]:
    """Each proxy's r(b) from capped()'s `proxies=` ({name: r(b)}, an EfficiencySet, or
    efficiencies or their paths)."""
    from collections.abc import Mapping

    from undercap.artifacts.efficiency import Efficiency, EfficiencySet, load_efficiencies

    if isinstance(proxies, Mapping):
        return {str(k): dict(v) for k, v in proxies.items()}
    if not isinstance(proxies, EfficiencySet):
        items = list(proxies)
        if all(isinstance(x, Efficiency) for x in items):
            proxies = EfficiencySet.of(items)
        else:
            proxies = load_efficiencies([str(x) for x in items])
    return {str(k): dict(v) for k, v in proxies.relatives.items()}


def capped_race(
    cap: Any, profile: Any, proxies: Any, follower: Any, samples_bmax: Any, fraction: float
) -> CappedRace:
    """capped(race=True)'s race: the plan from the profile and the proxies, checked."""
    from undercap import defaults
    from undercap.select.race import plan_race
    from undercap.train.setting import as_profile

    if profile is None or proxies is None:
        raise UndercapError("capped(race=True) needs profile= and proxies= (several)")
    if follower is not None:
        raise UndercapError("capped(race=True) with a changing cap: not supported; drop one")
    if samples_bmax is None:
        raise UndercapError("capped(race=True) needs samples_bmax= (the proxies' N(b_max))")
    plan = plan_race(
        as_profile(profile),
        proxy_relatives(proxies),
        cap.spec.power_limit_w,
        samples_bmax=samples_bmax,
        fraction=fraction,
        max_candidates=defaults.RACE_CANDIDATES,
        margin=defaults.RACE_MARGIN,
    )
    fav = plan.candidates[0]
    if (fav.batch_size, fav.freq_mhz) != (cap.spec.batch_size, cap.spec.freq_mhz):
        raise AssertionError("the race's favourite is the median's Algorithm 1 choice")
    return CappedRace(cap.session, plan, cap.target_accuracy)
