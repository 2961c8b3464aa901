"""Which grid points of a device run are evaluated, and how much of the split a look
scores; the sequential look both it and an estimate (estimate/evalsched.py) use.

Dense evaluation scores the whole held-out split at every grid point; the sparse plan
(the default) reports the same first grid point at the target while evaluating less
(docs/concepts/evaluation.md). Far from the target it jumps (`growth` times the samples
so far, or sooner where the secant through the last two looks reaches target -
`far_gap`: learning curves are concave, so the secant looks early, not late), and a
look stops once the items scored so far rule the target out (`Check`, at the end of an
evaluation batch: never more than the whole evaluation). Only whole evaluations go on
the curve and decide the target. A device run (or a GPU estimate) cannot go back to a
grid point it skipped: the one assumption is that between a far look and the next, the
accuracy does not climb from below the far line to the target.
"""

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import torch

from undercap import defaults
from undercap._compat import normal_inv_cdf
from undercap.errors import UndercapError

if TYPE_CHECKING:
    from undercap.train.spec import TrainSpec

SCHEDULES = ("dense", "sparse")
#: a look checks up to this share of the split, then finishes it: the last tenth would
#: save little (replayed on the CIFAR estimate's recorded verdicts: the same cost) and a
#: finished look is a point on the curve
LAST_CHECK = 0.9
#: a margin from the items' own spread needs this many of them (the t test's normal
#: approximation of a mean of bounded items; the expansion of t_quantile)
SPREAD_MIN_ITEMS = 30


@dataclass(frozen=True)
class SparseParams:
    """The knobs of a sparse schedule (defaults.ESTIMATE_CHECK_SAMPLES, _LOOK_ERROR, ...)."""

    screen_samples: int  # a look checks every this many held-out items (at batch ends)
    growth: float  # far jumps: next look at this factor times the samples so far
    far_gap: float  # far: clearly below target - far_gap
    jumps: bool  # far looks: fewer looks while the run is clearly below the target
    #: the chance a look rules out a point whose whole-split metric reaches the
    #: threshold, at most
    look_error: float = defaults.ESTIMATE_LOOK_ERROR
    #: far jumps go back over the grid points they skipped from a checkpoint (a CPU
    #: estimate: training repeats bit for bit); False: this plan's far looks, as a device's
    replay: bool = False
    #: a look reads its items' own spread where each makes several predictions (text
    #: windows: objective.ItemSpread); False: the Bhatia-Davis bound always, as before
    item_spread: bool = True

    @classmethod
    def default(
        cls, jumps: bool = True, screen_samples: Optional[int] = None, replay: bool = False
    ) -> "SparseParams":
        """The defaults (screen_samples None: defaults.ESTIMATE_CHECK_SAMPLES)."""
        return cls(
            screen_samples or defaults.ESTIMATE_CHECK_SAMPLES,
            defaults.ESTIMATE_SPARSE_GROWTH,
            defaults.ESTIMATE_SPARSE_FAR_GAP,
            jumps,
            replay=replay,
        )


def margin(
    threshold: float, m: int, population: int, z: float, spread: Optional[float] = None
) -> float:
    """z standard errors of a mean of m of `population` items drawn without
    replacement, at the largest variance a metric in [0, 1] with mean >= threshold can
    have, max p(1 - p) over p >= threshold (Bhatia-Davis); finite population
    correction from Cochran, Sampling Techniques, 3rd ed. 1977, Sec. 2.5. Where the
    items' own `spread` is known (objective.ItemSpread: items of many predictions, whose
    spread is far below that bound), the Student t margin of the same tail with it, if
    smaller (the one-sided t test; from SPREAD_MIN_ITEMS items on)."""
    p = min(max(threshold, 0.5), 1.0)
    fpc = max((population - m) / max(population - 1, 1), 0.0)
    bound = z * math.sqrt(p * (1.0 - p) / m * fpc)
    if spread is None or m < SPREAD_MIN_ITEMS:
        return bound
    return min(bound, t_quantile(z, m - 1) * spread * math.sqrt(fpc / m))


def t_quantile(z: float, df: int) -> float:
    """The Student t quantile with `df` degrees of freedom at the normal quantile z's
    probability: the Cornish-Fisher expansion, Abramowitz and Stegun 26.7.5, to four
    terms (for df >= 29 and z <= 3.8 within 1e-4 of the quantile from the density)."""
    g1 = (z**3 + z) / 4.0
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96.0
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384.0
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160.0
    v = float(df)
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


def check_count(items: int, every: int) -> int:
    """How many checks a look at `items` held-out items makes, one every `every` up to
    LAST_CHECK of them."""
    return int(LAST_CHECK * items) // every


def check_z(items: int, every: int, look_error: float) -> float:
    """The z of each of a look's checks (check_count of them): Bonferroni over them
    keeps a look's error at `look_error`."""
    return normal_inv_cdf(1.0 - look_error / max(1, check_count(items, every)))


class Check:
    """A look's stopping rule (the `stop` of Trainer.sequential): after each batch that
    reaches the next multiple of `every` items, whether the scored prefix shows the
    whole-split metric below `threshold`. Keeps the prefix it last checked."""

    def __init__(
        self, threshold: float, items: int, every: int, z: float, item_spread: bool = True
    ) -> None:
        self.threshold, self.items, self.every, self.z = threshold, items, every, z
        self.item_spread = item_spread
        self._next = every
        self.mean: Optional[float] = None
        self.m = 0
        self.spread: Optional[float] = None

    @classmethod
    def for_look(cls, threshold: float, trainer: Any, params: SparseParams) -> "Check":
        """The check of a look by `trainer` (an estimate's or a device run's): every
        params.screen_samples held-out items, or every evaluation batch where that is
        larger (a check can only come at the end of one: 512 on a GPU)."""
        n, every = trainer.eval_items, max(params.screen_samples, trainer.cfg.eval_batch_size)
        z = check_z(n, every, params.look_error)
        return cls(threshold, n, every, z, params.item_spread)

    def __call__(self, mean: float, m: int, spread: Optional[float] = None) -> bool:
        if m < self._next or m > LAST_CHECK * self.items:
            return False
        self._next = (m // self.every + 1) * self.every
        self.mean, self.m = mean, m
        self.spread = spread if self.item_spread else None
        return self.below(self.threshold)

    def upper(self, threshold: float) -> float:
        """An upper bound on the whole split's metric from the last checked prefix (1.0
        before any): the margin at `threshold`, or the rest all scored 1."""
        if self.mean is None:
            return 1.0
        n, m = self.items, self.m
        high = (self.mean * m + (n - m)) / n
        return min(self.mean + margin(threshold, m, n, self.z, self.spread), high)

    def below(self, threshold: float) -> bool:
        """Whether the last checked prefix rules the whole split out below `threshold`."""
        return self.upper(threshold) < threshold


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


#: what a look that stopped early reports to its caller: the items it scored
ScreenHook = Callable[[int], None]


class EvalPlan:
    """The sparse plan of one device run or GPU estimate (module docstring): `wants` is
    pure; `look` and `evaluated` move it on; `state_dict` goes into checkpoints."""

    def __init__(self, target: float, every: int, params: SparseParams) -> None:
        if not 0.0 < target <= 1.0:
            raise UndercapError(f"a sparse evaluation plan needs a target in (0, 1], not {target}")
        self.target, self.every, self.params = target, int(every), params
        self.near = not params.jumps
        self.look_at = 0
        self.prev: Optional[Tuple[int, float]] = None  # the last far look (samples, mean)
        self.looks = self.full = self.screened = 0
        self.on_screen: Optional[ScreenHook] = None

    def wants(self, samples: int) -> bool:
        """Whether the grid point at `samples` gets a look."""
        return self.near or samples >= self.look_at

    def look(self, trainer: Any, force: bool = False) -> None:
        """The due grid point's look (whole when `force`d): a whole evaluation reaches
        `evaluated` through the trainer; one that stops early decides here whether the
        run is still far, and reports to `on_screen`."""
        self.looks += 1
        if force:
            trainer.evaluate()
            return
        check = Check.for_look(self.target, trainer, self.params)
        point, done = trainer.sequential(check)
        if point is not None:
            return
        self.screened += done.items
        line = self.target - self.params.far_gap
        self._moved(trainer.samples, float(check.mean or 0.0), check.upper(line))
        if self.on_screen is not None:
            self.on_screen(done.items)

    def evaluated(self, samples: int, accuracy: float) -> None:
        """A whole evaluation at `samples` (exact: its own upper bound)."""
        self.full += 1
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
            "counts": [self.looks, self.full, self.screened],
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """A checkpoint's plan (one written with the subset screens before the
        sequential looks loads too: its learned screen costs are not needed)."""
        self.near, self.look_at = bool(state["near"]), int(state["look_at"])
        self.prev = None if state["prev"] is None else (int(state["prev"][0]), state["prev"][1])
        self.looks, self.full, self.screened = (int(c) for c in state["counts"])


def look_order(eval_items: int, seed: int) -> torch.Tensor:
    """The seeded random order a device run's looks read its held-out split in, once
    (Trainer.reorder_eval; an estimate loads its split so already)."""
    return torch.randperm(int(eval_items), generator=torch.Generator().manual_seed(int(seed)))


def plan_for(spec: "TrainSpec") -> Optional[EvalPlan]:
    """The plan of a device run of `spec` (None: dense, or no target to look for)."""
    if spec.eval_schedule == "dense" or spec.target_accuracy is None:
        return None
    # a check after every evaluation batch (the device's batches are its finest checks)
    params = SparseParams.default(jumps=True, screen_samples=defaults.TRAIN_EVAL_BATCH)
    return EvalPlan(spec.target_accuracy, spec.eval_every_samples, params)
