"""The sparse evaluation schedule of an estimate run (issue 34): dense N(b) for a
fraction of the evaluations.

Dense evaluation (train.loop.Trainer.run) evaluates the whole held-out split at
every grid point (every `eval_every_samples`, or every step above that batch size);
N(b) is the first grid point whose accuracy is >= the target. Evaluating costs far
more than training there (93.7% of a CIFAR estimate's wall time). This schedule
reports the same grid point while evaluating the whole split at only a few:

* Screens. A grid point is first scored on a prefix of the held-out split (a random
  subset: estimate loads the test split in a seeded random order), growing through
  `stages`. The point is ruled out ("below the threshold") when the subset's mean
  plus `z` standard errors is below it. The standard error is that of a mean of m
  draws without replacement from the N held-out items, sqrt(v / m) *
  sqrt((N - m) / (N - 1)) (the finite population correction: Cochran, Sampling
  Techniques, 3rd ed. 1977, Sec. 2.5), with v = max(p(1 - p)) over p >= threshold,
  the largest variance of a [0, 1] metric whose mean reaches the threshold
  (Bhatia-Davis bound): so a point whose whole-split metric reaches the threshold
  is ruled out with probability at most Phi(-z) per look (1.3e-3 at z = 3, normal
  approximation). Every point not ruled out is evaluated on the whole split, the
  value stored on the curve; N(b) is read from those values only.
* Far jumps (CPU only). While a look (screens, then the whole split where they
  cannot tell) shows the run below the target minus `far_gap`, the next look is
  `growth` times later, and an in-memory checkpoint (Trainer.state_dict) is kept at
  every such look. The first look that is not far restores the last checkpoint and
  screens every grid point from there (replay: CPU training is bit-for-bit
  repeatable at a fixed thread count, so the replayed grid points are the dense
  run's); a screen there that shows the run far again resumes the jumps. The one
  assumption: between two looks both `far_gap` below the target the accuracy did
  not touch it. CUDA training is not repeatable (without deterministic kernels), so
  there the run screens every grid point from the start: no jumps, no replay.
* Reference runs (--target-fraction, no target yet) screen every grid point against
  their best-so-far: a point ruled out is "no new best" for the plateau count, every
  other is evaluated, so the best accuracy and the plateau stop are dense's.

The end of the budget is always evaluated on the whole split, as dense does.
"""

import copy
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from undercap.train.evalplan import SCHEDULES, SparseParams, margin, next_look, stages

__all__ = ["SCHEDULES", "SparseParams", "SparseStats", "below", "run_sparse", "stages"]


@dataclass(frozen=True)
class SparseStats:
    """What one sparse run evaluated (kept in its record, "eval")."""

    stop: str  # "target", "budget" or "plateau"
    looks: int  # grid points looked at (screened or evaluated)
    screened_items: int  # held-out items scored by screens, all stages
    full_evals: int  # whole-split evaluations (the curve's points)
    replayed_samples: int  # samples trained twice after restoring a checkpoint


def worth_screening(m: int, n: int, threshold: float, z: float, last: Optional[float]) -> bool:
    """Whether a screen of m of the n held-out items is worth its cost, given `last`,
    the latest estimate of the metric (a screen's mean or a whole evaluation): its
    chance to rule the point out, Phi((threshold - margin - last) / se), times the n
    items the whole evaluation it would save scores, against its own m (the expected-
    cost rule). Near the target a screen rarely rules out and only adds its items to
    the whole evaluation. Skipping one costs at most a whole evaluation, which is
    exact: N(b) is the same either way. No estimate yet: screen."""
    if last is None:
        return True
    # a stage is at most half the split (stages), so the standard error is never 0
    se = math.sqrt(max(last * (1.0 - last), 1e-4) / m * (n - m) / max(n - 1, 1))
    gap = threshold - margin(threshold, m, n, z) - last
    p_out = 0.5 * math.erfc(-gap / (se * math.sqrt(2.0)))  # Phi(gap / se)
    return p_out * n > m


def below(
    trainer: Any,
    threshold: float,
    sizes: Tuple[int, ...],
    z: float,
    far: float = -1.0,
    tally: "Optional[_Tally]" = None,
) -> Tuple[bool, bool, int]:
    """Whether screens show the whole-split metric below `threshold` (with the
    margin), whether one showed it below `far` too, and how many items they scored.
    With a `tally`, a stage not `worth_screening` at its latest estimate is skipped."""
    n, scored, is_far = trainer.eval_items, 0, False
    for m in sizes:
        if tally is not None and not worth_screening(m, n, threshold, z, tally.last):
            continue
        acc = trainer.screen(m)
        scored += m
        if tally is not None:
            tally.last = acc
        is_far = is_far or acc + margin(far, m, n, z) < far
        if acc + margin(threshold, m, n, z) < threshold:
            return True, is_far, scored
    return False, is_far, scored


@dataclass
class _Tally:
    looks: int = 0
    screened: int = 0
    full: int = 0
    replayed: int = 0
    last: Optional[float] = None  # the latest estimate of the metric (worth_screening)

    def stats(self, stop: str) -> SparseStats:
        return SparseStats(stop, self.looks, self.screened, self.full, self.replayed)


def run_sparse(
    trainer: Any, target: Optional[float], patience: Optional[int], params: SparseParams
) -> SparseStats:
    """Train `trainer` (train.loop.Trainer) to its target or budget under the sparse
    schedule; a reference run (target None) to its budget or plateau."""
    if target is None:
        return _reference(trainer, patience, params)
    return _target(trainer, target, params)


def _target(tr: Any, target: float, params: SparseParams) -> SparseStats:
    tally, sizes = _Tally(), stages(params.screen_samples, tr.eval_items)
    far = params.jumps
    check = _snapshot(tr) if far else None
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
            ruled_out, evaluated = _far(tr, target - params.far_gap, sizes[:2], params.z, tally)
            if ruled_out and not at_end:
                check, check_at = _snapshot(tr), due
                look_at = next_look(due, every, params.growth)
                continue
            far = False
            if not ruled_out and check_at < last:  # grid points skipped: replay them
                tally.replayed += due - check_at
                _restore(tr, check)
                prev_due = check_at
                continue
            if evaluated:  # the far look was this point's whole evaluation
                continue
        far_again = _look(tr, target, sizes, params.z, tally, at_end, target - params.far_gap)
        if far_again and params.jumps and not at_end:  # fell back far: jump again
            far, check, check_at = True, _snapshot(tr), due
            look_at = next_look(due, every, params.growth)
    return tally.stats("target" if tr.samples_to_target is not None else "budget")


def _far(
    tr: Any, threshold: float, sizes: Tuple[int, ...], z: float, tally: _Tally
) -> Tuple[bool, bool]:
    """A far look: screens, then, where they cannot tell (or no screen fits the
    split), a whole evaluation: exact, kept on the curve (a replay rolls the curve
    back with the rest of the state). (ruled out, evaluated on the whole split)."""
    tally.looks += 1
    if sizes:
        ruled_out, _, n = below(tr, threshold, sizes, z, tally=tally)
        tally.screened += n
        if ruled_out:
            return True, False
    tally.full += 1
    tally.last = tr.evaluate().accuracy
    return bool(tally.last < threshold), True


def _look(
    tr: Any,
    threshold: float,
    sizes: Tuple[int, ...],
    z: float,
    tally: _Tally,
    force: bool,
    far: float = -1.0,
) -> bool:
    """Screen one grid point against `threshold`, evaluate it on the whole split
    unless ruled out (always at the end of the budget); True if a screen showed it
    below `far` as well (the run fell back far from the target)."""
    tally.looks += 1
    if not force and sizes:
        ruled_out, is_far, n = below(tr, threshold, sizes, z, far, tally)
        tally.screened += n
        if ruled_out:
            return is_far
    tally.last = tr.evaluate().accuracy
    tally.full += 1
    return False


def _reference(tr: Any, patience: Optional[int], params: SparseParams) -> SparseStats:
    """Every grid point against the best so far: the dense plateau rule, exactly
    (w.h.p.); right after a new best the point goes straight to the whole split
    (a rising curve would pass every screen anyway)."""
    tally, sizes = _Tally(), stages(params.screen_samples, tr.eval_items)
    best, since, rising = -math.inf, 0, True
    while not tr.done:
        before = tr.samples
        tr.step()
        if not tr.eval_due(before):
            continue
        at_end = tr.samples >= tr.cfg.max_samples
        screens = () if rising else sizes
        n_curve = len(tr.curve)
        _look(tr, best, screens, params.z, tally, force=at_end)
        acc = tr.curve[-1].accuracy if len(tr.curve) > n_curve else -math.inf
        rising = acc > best
        best, since = max(best, acc), 0 if rising else since + 1
        if patience is not None and since >= patience:
            return tally.stats("plateau")
    return tally.stats("budget")


def _snapshot(tr: Any) -> Dict[str, Any]:
    return copy.deepcopy(tr.state_dict())


def _restore(tr: Any, state: Dict[str, Any]) -> None:
    """Back to a checkpoint; the seconds spent since stay spent (they are the run's
    cost), and the checkpoint is kept for another restore."""
    train_s, eval_s = tr.train_wall_s, tr.eval_wall_s
    tr.load_state_dict(copy.deepcopy(state))
    tr.train_wall_s, tr.eval_wall_s = train_s, eval_s
