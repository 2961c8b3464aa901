"""The sparse evaluation schedule of an estimate run (issue 34): dense N(b) for a
fraction of the evaluations. See docs/concepts/evaluation.md for the whole of it.

Dense evaluation (train.loop.Trainer.run) scores the whole held-out split at every grid
point; N(b) is the first grid point whose accuracy is >= the target. This schedule
reports the same grid point while evaluating the whole split at only a few:

* Sequential looks (train/loop/evalplan.Check, shared with device runs) rule a point
  out once the items scored fall `z` standard errors below the threshold (Cochran's
  error without replacement, a Bhatia-Davis or Student t variance, Bonferroni's z: as
  cited there). A look no check stops is the whole evaluation: N(b) reads those alone.
* Far jumps with replay (CPU): while a look shows the run `far_gap` below the target,
  the next look is `growth` times later and a checkpoint is kept; the first look that
  is not far restores it and looks at every grid point from there (CPU training is
  bit-for-bit repeatable at a fixed thread count). The one assumption: between two
  looks both `far_gap` below the target the accuracy did not touch it.
* Far looks without replay (CUDA, not repeatable): a device run's plan
  (train/loop/evalplan.py).
* Reference runs (no target yet) look at every grid point against their best so far,
  so the best accuracy and the plateau stop are dense's.

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
    """A far look's check (replay): the point is far, below the far line (its threshold);
    or, once the items scored rule out the target while their mean sits at or above the
    far line (the whole split could only tell "not far"), a near look's, below target."""

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
    `force`d; a far look's _FarCheck given the `target`): (curve point or None, Check)."""
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
    """Every grid point against the best so far: the dense plateau rule (w.h.p.)."""
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
