"""The sparse evaluation schedule of an estimate run (issue 34): dense N(b) for a
fraction of the evaluations.

Dense evaluation (train.loop.Trainer.run) evaluates the whole held-out split at
every grid point (every `eval_every_samples`, or every step above that batch size);
N(b) is the first grid point whose accuracy is >= the target. Evaluating costs far
more than training there (93.7% of a CIFAR estimate's wall time). This schedule
reports the same grid point while evaluating the whole split at only a few:

* Sequential looks (train/loop/evalplan.Check, which device runs share). A grid point's
  look scores the held-out split in its evaluation batches, in order (a random order:
  estimate loads the test split in a seeded random order), and after each batch asks
  whether the rest can change the verdict: the point is ruled out ("below the
  threshold") once the items scored so far, m of them, have a mean plus `z` standard
  errors below it, or once even all the rest scored right could not lift it there. The standard error is that of a mean of m draws without
  replacement from the N held-out items, sqrt(v / m) * sqrt((N - m) / (N - 1)) (the
  finite population correction: Cochran, Sampling Techniques, 3rd ed. 1977, Sec. 2.5),
  with v = max(p(1 - p)) over p >= threshold, the largest variance of a [0, 1] metric
  whose mean reaches the threshold (Bhatia-Davis bound); where an item makes several
  predictions (a text window, one per character) the metric is a cluster sample's,
  and the items' own spread (train/loop/scoring.ItemSpread) gives a Student t margin of
  the same tail where that is smaller (the one-sided t test: a split of windows whose
  accuracy varies by 0.1 from one to the next gets a margin a fifth of the bound's,
  from 30 items on). The checks come every
  `screen_samples` items (or every evaluation batch, if larger: 512 on a GPU) up to
  90% of the split, K of them, each at z = Phi^-1(1 - look_error / K) (Bonferroni): a
  point whose whole-split metric reaches the threshold is ruled out with probability
  at most `look_error` per look (2.7e-3: the two z = 3 screens of the schedule before,
  normal approximation). A look no check stops is the whole evaluation itself
  (Trainer.evaluate's sums in the same batches), its value stored on the curve; N(b)
  is read from those values only. Unlike separate screens, a look that cannot tell
  costs nothing beyond the whole evaluation (the subset screens before it were
  scored separately, their items again by the whole evaluation where they could not
  tell: 37% of the CIFAR job's evaluation time went to screens).
* Far jumps with replay (CPU). While a look shows the run below the target minus `far_gap`,
  the next look is `growth` times later, and an in-memory checkpoint
  (Trainer.state_dict) is kept at every such look. A far look tests the far line; one
  whose items rule the target out while their mean sits at or above that line stops
  there, not far (the whole split could only have said so). The first look that is not far
  restores the last checkpoint and looks at every grid point from there (replay: CPU
  training is bit-for-bit repeatable at a fixed thread count, so the replayed grid
  points are the dense run's); a look there that shows the run far again resumes the
  jumps. The one assumption: between two looks both `far_gap` below the target the
  accuracy did not touch it.
* Far looks without replay (CUDA). CUDA training is not repeatable (without
  deterministic kernels), so a restored checkpoint would not retrace the run: there
  the run follows a device run's plan, and its one assumption (train/loop/evalplan.py:
  secant looks, no return to far). On the H200's dense curves
  (benchmarks/results/estimate_cost_h200/looks) it saves a third of the looks and
  keeps every N(b).
* Reference runs (--target-fraction, no target yet) look at every grid point against
  their best-so-far: a point ruled out is "no new best" for the plateau count, every
  other is evaluated whole, so the best accuracy and the plateau stop are dense's.

The end of the budget is always evaluated on the whole split, as dense does.
"""

import copy
import math
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional

from undercap.train.loop.evalplan import SCHEDULES, Check, EvalPlan, SparseParams, next_look

__all__ = ["SCHEDULES", "SparseParams", "SparseStats", "run_sparse"]


@dataclass
class SparseStats:
    """What one sparse run evaluated (kept in its record, "eval"), tallied as it runs."""

    stop: str = "budget"  # "target", "budget" or "plateau"
    looks: int = 0  # grid points looked at
    screened_items: int = 0  # held-out items scored by looks that stopped before the end
    full_evals: int = 0  # whole-split evaluations (the curve's points)
    replayed_samples: int = 0  # samples trained twice after restoring a checkpoint


def run_sparse(
    trainer: Any, target: Optional[float], patience: Optional[int], params: SparseParams
) -> SparseStats:
    """Train `trainer` (train.loop.Trainer) to its target or budget under the sparse
    schedule; a reference run (target None) to its budget or plateau."""
    if target is None:
        return _reference(trainer, patience, params)
    if params.jumps and params.replay:
        return _replayed(trainer, target, params)
    return _planned(trainer, target, params)


def _planned(tr: Any, target: float, params: SparseParams) -> SparseStats:
    """No replay: the trainer's own loop under a device run's plan, which decides the
    looks (Trainer.eval_due asks it; far looks only with params.jumps) and is told of
    every whole evaluation."""
    plan = tr.plan = EvalPlan(target, tr.cfg.eval_every_samples, params)
    tr.run()
    stop = "target" if tr.samples_to_target is not None else "budget"
    return SparseStats(stop, plan.looks, plan.screened, plan.full)


class _FarCheck(Check):
    """A far look's check (replay): it rules the point far, below the far line (its
    threshold); or it stops once the items scored rule out the target while their mean
    sits at or above the far line, where going on to the whole split could only tell
    "not far" (bar a mean that falls back): the point is then a near look's, below the
    target."""

    def __init__(self, check: Check, target: float) -> None:
        super().__init__(check.threshold, check.items, check.every, check.z, check.item_spread)
        self.target = target

    def __call__(self, mean: float, m: int, spread: Optional[float] = None) -> bool:
        if super().__call__(mean, m, spread):
            return True
        return self.m == m and mean >= self.threshold and self.below(self.target)


def _look(
    tr: Any,
    threshold: float,
    params: SparseParams,
    tally: SparseStats,
    force: bool,
    target: Optional[float] = None,
) -> Any:
    """One grid point's sequential look against `threshold` (the whole split when
    `force`d: the end of the budget; a far look's, _FarCheck, given the `target`).
    (its curve point or None, its Check)."""
    tally.looks += 1
    check = Check.for_look(threshold, tr, params)
    if target is not None:
        check = _FarCheck(check, target)
    if force:
        point = tr.evaluate()
    else:
        point, done = tr.sequential(check)
        if point is None:
            tally.screened_items += done.items
    tally.full_evals += point is not None
    return point, check


def _replayed(tr: Any, target: float, params: SparseParams) -> SparseStats:
    """Far jumps that go back over the grid points they skipped (module docstring)."""
    tally, far, far_line = SparseStats(), True, target - params.far_gap
    check = _snapshot(tr)
    check_at = prev_due = look_at = 0
    every, budget = tr.cfg.eval_every_samples, tr.cfg.max_samples
    while not tr.done:
        before = tr.samples
        tr.step()
        if not tr.eval_due(before):
            continue
        due, last, prev_due = tr.samples, prev_due, tr.samples
        at_end = due >= budget
        if far:
            if due < look_at and not at_end:
                continue
            point, seen = _look(tr, far_line, params, tally, at_end, target)
            ruled_out = seen.below(far_line) if point is None else point.accuracy < far_line
            if ruled_out and not at_end:
                check, check_at = _snapshot(tr), due
                look_at = next_look(due, every, params.growth)
                continue
            far = False
            if not ruled_out and check_at < last:  # grid points skipped: replay them
                tally.replayed_samples += due - check_at
                _restore(tr, check)
                prev_due = check_at
            continue  # a far look that is not far is whole or below the target: done
        point, seen = _look(tr, target, params, tally, at_end)
        if point is None and seen.below(far_line):  # fell back far
            far, check, check_at = True, _snapshot(tr), due
            look_at = next_look(due, every, params.growth)
    return replace(tally, stop="target" if tr.samples_to_target is not None else "budget")


def _reference(tr: Any, patience: Optional[int], params: SparseParams) -> SparseStats:
    """Every grid point against the best so far: the dense plateau rule, exactly
    (w.h.p.)."""
    tally, best, since = SparseStats(), -math.inf, 0
    while not tr.done:
        before = tr.samples
        tr.step()
        if not tr.eval_due(before):
            continue
        at_end = tr.samples >= tr.cfg.max_samples
        point, _ = _look(tr, best, params, tally, at_end)
        acc = -math.inf if point is None else point.accuracy
        best, since = (acc, 0) if acc > best else (best, since + 1)
        if patience is not None and since >= patience:
            return replace(tally, stop="plateau")
    return tally


def _snapshot(tr: Any) -> Dict[str, Any]:
    return copy.deepcopy(tr.state_dict())


def _restore(tr: Any, state: Dict[str, Any]) -> None:
    """Back to a checkpoint; the seconds spent since stay spent (they are the run's
    cost), and the checkpoint is kept for another restore."""
    train_s, eval_s = tr.train_wall_s, tr.eval_wall_s
    tr.load_state_dict(copy.deepcopy(state))
    tr.train_wall_s, tr.eval_wall_s = train_s, eval_s
