"""Which grid points of a device run are evaluated, and on how much of the split.

Evaluation on a board costs real seconds and joules (runner.py pauses the training's
accounting for it and reports it beside: `eval_time_s`). Dense evaluation scores the
whole held-out split at every grid point (every `eval_every_samples`); the time to
accuracy is the first grid point at or above the target. The sparse plan (the default)
reports the same grid point while evaluating far less:

* Looks. Far from the target the next look is the earlier of `growth` times the
  samples so far (estimate/evalsched.py's far jumps) and the grid point where the
  secant through the last two looks reaches the far line, target - `far_gap`, from the
  current look's upper bound. Learning curves are concave once past their first
  steps, so the secant over-predicts the gain ahead and the look comes early, not
  late; `growth` bounds the jump where the curve is still convex. Once a look is not
  far, every grid point gets one (the dense grid), to the end.
* Screens. A look first scores a seeded random subset of the split, growing through
  `stages`; it rules the grid point out when the subset's mean plus `z` standard
  errors is below the target (`margin`: Bhatia-Davis variance bound, finite
  population correction). Only a look no screen rules out scores the whole split,
  and only the whole split's value goes on the curve and decides the target. A split
  too small for a screen (at most half of it) is scored whole at every look, and so
  is a split where a screen costs more than `SCREEN_MAX_COST` of a whole pass: small
  models on small splits are all fixed cost per pass (the H200 measured a 602-item
  screen at 42% of a 2,500-item evaluation; the simulated Nano models the same
  launches and host overhead), so each stage's cost is learned from the seconds the
  run is charged for it (`record`) and a stage that saves too little is dropped.

Unlike an estimate (CPU, bit-for-bit repeatable), a device run cannot go back to a
grid point it skipped: the one assumption is that between a far look and the next,
the accuracy does not climb from below the far line to the target.
"""

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import torch

from undercap import defaults
from undercap.errors import UndercapError

if TYPE_CHECKING:
    from undercap.train.spec import TrainSpec

SCHEDULES = ("dense", "sparse")
#: a screen stage is kept while it costs at most this share of a whole evaluation
SCREEN_MAX_COST = 0.5


@dataclass(frozen=True)
class SparseParams:
    """The knobs of a sparse schedule (defaults.TRAIN_SCREEN_*, ESTIMATE_SPARSE_*; an
    estimate replaces screen_samples by its checks' spacing)."""

    screen_samples: int  # first screen's subset size; later stages x4
    z: float  # standard errors of margin before a screen rules a point out
    growth: float  # far jumps: next look at this factor times the samples so far
    far_gap: float  # far: clearly below target - far_gap
    jumps: bool  # far jumps (an estimate replays the skipped points; a device cannot)
    #: an estimate's sequential look (estimate/evalsched.py): the chance it rules out a
    #: point whose whole-split metric reaches the threshold, at most (screen_samples is
    #: then how often it checks, in held-out items)
    look_error: float = defaults.ESTIMATE_LOOK_ERROR

    @classmethod
    def default(cls, jumps: bool = True, screen_samples: Optional[int] = None) -> "SparseParams":
        """The defaults (screen_samples None: defaults.TRAIN_SCREEN_SAMPLES)."""
        return cls(
            screen_samples or defaults.TRAIN_SCREEN_SAMPLES,
            defaults.TRAIN_SCREEN_Z,
            defaults.ESTIMATE_SPARSE_GROWTH,
            defaults.ESTIMATE_SPARSE_FAR_GAP,
            jumps,
        )


def stages(first: int, population: int) -> Tuple[int, ...]:
    """Screen subset sizes: `first`, then x4, each at most half the split (a larger
    screen saves too little over the whole split to be worth its cost)."""
    out, m = [], max(1, int(first))
    while m <= population // 2:
        out.append(m)
        m *= 4
    return tuple(out)


def margin(threshold: float, m: int, population: int, z: float) -> float:
    """z standard errors of a mean of m of `population` items drawn without
    replacement, at the largest variance a metric in [0, 1] with mean >= threshold can
    have, max p(1 - p) over p >= threshold (Bhatia-Davis); finite population
    correction from Cochran, Sampling Techniques, 3rd ed. 1977, Sec. 2.5."""
    p = min(max(threshold, 0.5), 1.0)
    fpc = (population - m) / max(population - 1, 1)
    return z * math.sqrt(p * (1.0 - p) / m * max(fpc, 0.0))


def next_look(samples: int, every: int, growth: float) -> int:
    """Far jumps: the first grid multiple of `every` at or beyond samples * growth,
    at least one interval ahead."""
    want = max(samples + every, int(math.ceil(samples * growth)))
    return int(math.ceil(want / every)) * every


def secant_look(
    prev: Optional[Tuple[int, float]], samples: int, upper: float, line: float, every: int
) -> Optional[int]:
    """The grid point where the line through the previous look `prev` (samples,
    accuracy) and (samples, upper) reaches `line`, at least one interval ahead; None
    when it does not rise (no bound from the secant)."""
    if prev is None or samples <= prev[0] or upper <= prev[1]:
        return None
    slope = (upper - prev[1]) / (samples - prev[0])
    want = samples + max(every, int(math.ceil((line - upper) / slope)))
    return int(math.ceil(want / every)) * every


#: what a screen reports to its caller: (items scored, host seconds, ruled out)
ScreenHook = Callable[[int, float, bool], None]


class EvalPlan:
    """The sparse plan of one device run (module docstring). `wants` is pure (the
    runner's step hook and the loop both ask it); `screened_out` and `evaluated`
    move it on; `state_dict` goes into the run's checkpoints."""

    def __init__(
        self,
        target: float,
        every: int,
        eval_items: int,
        params: SparseParams,
        seed: int = 0,
        max_gap: Optional[int] = None,
    ) -> None:
        if not 0.0 < target <= 1.0:
            raise UndercapError(f"a sparse evaluation plan needs a target in (0, 1], not {target}")
        self.target, self.every, self.params = target, int(every), params
        self.sizes = stages(params.screen_samples, eval_items)
        gen = torch.Generator().manual_seed(int(seed))
        self.order = torch.randperm(int(eval_items), generator=gen)  # the screens' subsets
        self.near = not params.jumps
        self.look_at = 0
        # whole evaluations at most this many samples apart (a reader of the curve
        # during the run needs them: the online re-selection's minimum rate)
        self.max_gap, self.last_full = max_gap, 0
        self.prev: Optional[Tuple[int, float]] = None  # the last far look (samples, mean)
        self.looks = self.full = self.screened = 0
        self.cost_s: Dict[int, float] = {}  # items scored -> device seconds charged
        self.on_screen: Optional[ScreenHook] = None

    def wants(self, samples: int) -> bool:
        """Whether the grid point at `samples` gets a look."""
        return self.near or samples >= self.look_at or self._gap_due(samples)

    def _gap_due(self, samples: int) -> bool:
        return self.max_gap is not None and samples - self.last_full >= self.max_gap

    def screened_out(self, trainer: Any, force: bool = False) -> bool:
        """Screen the due grid point (not when `force`d): True if the screens rule it
        out (no whole evaluation); they also decide whether the run is still far."""
        self.looks += 1
        if force or self._gap_due(trainer.samples):
            return False
        n, far_line = trainer.eval_items, self.target - self.params.far_gap
        for m in self.worth_it(n):
            t0 = time.perf_counter()
            acc = trainer.screen(m, self.order[:m])
            self.screened += m
            out = acc + margin(self.target, m, n, self.params.z) < self.target
            upper = acc + margin(far_line, m, n, self.params.z)
            if out:
                self._moved(trainer.samples, acc, upper)
            if self.on_screen is not None:
                self.on_screen(m, time.perf_counter() - t0, out)
            if out:
                return True
        return False

    def record(self, items: int, seconds: float) -> None:
        """What scoring `items` held-out items was charged (the last one counts)."""
        self.cost_s[int(items)] = float(seconds)

    def worth_it(self, n: int) -> Tuple[int, ...]:
        """The screen stages worth their cost: none before a whole pass is measured (the
        first look is scored whole), then each until its own cost is known too."""
        whole = self.cost_s.get(n)
        if whole is None:
            return ()
        cheap = [m for m in self.sizes if self.cost_s.get(m, 0.0) <= SCREEN_MAX_COST * whole]
        return tuple(cheap)

    def evaluated(self, samples: int, accuracy: float) -> None:
        """A whole evaluation at `samples` (exact: its own upper bound)."""
        self.full += 1
        self.last_full = samples
        self._moved(samples, accuracy, accuracy)

    def _moved(self, samples: int, mean: float, upper: float) -> None:
        if self.near:
            return
        line = self.target - self.params.far_gap
        if upper >= line:
            self.near = True
            return
        jump = next_look(samples, self.every, self.params.growth)
        secant = secant_look(self.prev, samples, upper, line, self.every)
        self.look_at = jump if secant is None else min(jump, secant)
        self.prev = (samples, mean)

    def stats(self) -> Dict[str, Any]:
        """What the plan did, for the run's result (train.json "evaluation")."""
        return {
            "schedule": "sparse",
            "looks": self.looks,
            "full_evaluations": self.full,
            "screened_items": self.screened,
        }

    def state_dict(self) -> Dict[str, Any]:
        return {
            "near": self.near,
            "look_at": self.look_at,
            "prev": self.prev,
            "last_full": self.last_full,
            "counts": [self.looks, self.full, self.screened],
            "cost_s": [[m, c] for m, c in sorted(self.cost_s.items())],
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.near, self.look_at = bool(state["near"]), int(state["look_at"])
        self.prev = None if state["prev"] is None else (int(state["prev"][0]), state["prev"][1])
        self.looks, self.full, self.screened = (int(c) for c in state["counts"])
        self.last_full = int(state.get("last_full", 0))
        self.cost_s = {int(m): float(c) for m, c in state.get("cost_s", [])}


def plan_for(spec: "TrainSpec", eval_items: int) -> Optional[EvalPlan]:
    """The plan of a device run of `spec` (None: dense, or no target to look for). The
    online re-selection (train/online.py) reads whole evaluations: with it on, they
    come at least every defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES, the rate it was
    measured with."""
    if spec.eval_schedule == "dense" or spec.target_accuracy is None:
        return None
    params = SparseParams.default(jumps=True)
    gap = defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES if spec.online else None
    return EvalPlan(
        spec.target_accuracy,
        spec.eval_every_samples,
        eval_items,
        params,
        seed=spec.seed,
        max_gap=gap,
    )
