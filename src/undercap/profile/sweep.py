"""Which configurations to measure: the full sweep, and the efficient one (paper
Sec. 4.1) made cheaper. Pure logic over a `probe(b, i)` callback that measures batch
size b at the i-th clock of the table, so it is tested on tables as well as on devices.

Every shortcut rests on physics or on the paper:

1. At one batch size, power rises with the clock (dynamic power ~ C V(f)^2 f, V
   non-decreasing in f: DVFS tables; paper Fig. 1), so the feasible clocks of b are a
   prefix of the table: gallop down from an upper bound (1, 2, 4, ... steps), then
   bisect. The answer is usually at or just below the bound: one or two probes.
2. At one clock a smaller batch draws no more power than a larger one (occupancy and
   busy time grow with b; paper Sec. 4.1), so b's highest feasible clock bounds every
   larger batch's: batch sizes ascend, each search starting at the previous answer; one
   infeasible at every clock ends them.
3. Time per sample falls as the clock rises, so with r(b) known, t(b, f_hi) * r(b)
   above the best score so far (f_hi: b's upper bound) proves that b cannot win
   Algorithm 1 (score t * r, Sec. 4.3): b is pruned after one measurement.
4. Peaks are noisy, so 1 and 2 can fail near the limit. A row whose peak + margin lies
   within its decision band of the limit (`near`) bounds nothing: rows above a search's
   answer are measured until one is clearly infeasible, and the next bound is the
   highest row feasible or near. So the sweep answers as Algorithm 1 on the full table
   of the same measurements would, unless noise exceeds the band.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from undercap.artifacts.profile import ProfileRow

Probe = Callable[[int, int], ProfileRow]
Test = Callable[[ProfileRow], bool]

SKIP_BOUND = "above a smaller batch size's highest feasible clock"
SKIP_SEARCH = "between the search's probes"
SKIP_PRUNED = "batch size cannot win (t x r(b) bound)"
SKIP_NO_R = "no r(b): never reaches the target"
SKIP_INFEASIBLE = "a smaller batch size is infeasible at every clock"


def full_plan(batch_sizes: Sequence[int], n_freqs: int) -> List[Tuple[int, int]]:
    """The full sweep's configurations in measuring order: batch sizes ascending (one
    warm-up each), each at every clock ascending."""
    return [(b, i) for b in sorted(batch_sizes) for i in range(n_freqs)]


@dataclass
class SweepOutcome:
    """What the efficient sweep decided, for the profile's `sweep` record."""

    highest_feasible: Dict[int, Optional[int]] = field(default_factory=dict)  # b -> index
    pruned: Dict[int, str] = field(default_factory=dict)  # b -> why it cannot win
    skipped: Dict[str, int] = field(default_factory=dict)  # reason -> configurations

    def skip(self, reason: str, n: int) -> None:
        if n > 0:
            self.skipped[reason] = self.skipped.get(reason, 0) + n


class _Search:
    """The highest feasible clock of one batch size below a bound (points 1 and 4)."""

    def __init__(self, probe: Probe, feasible: Test, near: Test, b: int) -> None:
        self.probe, self.feasible, self.near, self.b = probe, feasible, near, b
        self.rows: Dict[int, ProfileRow] = {}

    def row(self, i: int) -> ProfileRow:
        if i not in self.rows:
            self.rows[i] = self.probe(self.b, i)
        return self.rows[i]

    def ok(self, i: int) -> bool:
        return self.feasible(self.row(i))

    def run(self, hi: int) -> Tuple[Optional[int], Optional[int]]:
        """(highest feasible index <= hi or None, highest index <= hi that was
        feasible or near the limit: the bound for the next batch size, or None)."""
        good = hi if self.ok(hi) else self._gallop(hi)
        return self._guard(good, hi)

    def _gallop(self, hi: int) -> Optional[int]:
        bad, step = hi, 1
        while bad > 0:
            i = max(0, bad - step)
            if self.ok(i):
                return self._bisect(i, bad)
            bad, step = i, step * 2
        return None

    def _bisect(self, good: int, bad: int) -> int:
        while bad - good > 1:
            mid = (good + bad) // 2
            if self.ok(mid):
                good = mid
            else:
                bad = mid
        return good

    def _guard(self, good: Optional[int], hi: int) -> Tuple[Optional[int], Optional[int]]:
        """Walk up from the answer while rows are near the limit: a noisy row there may
        read infeasible below a feasible one (point 4)."""
        reach = good
        i = -1 if good is None else good
        while i + 1 <= hi:
            row = self.row(i + 1)
            if self.feasible(row):
                good = reach = i + 1
            elif self.near(row):
                reach = i + 1
            else:
                break
            i += 1
        return good, reach


def efficient_sweep(
    batch_sizes: Sequence[int],
    n_freqs: int,
    probe: Probe,
    feasible: Test,
    near: Test,
    relative: Optional[Mapping[int, float]] = None,
) -> SweepOutcome:
    """Measure what Algorithm 1 needs for one limit (module docstring). `feasible`
    and `near` judge a row against the limit (peak + margin); `relative` is r(b)
    (None: no pruning, every batch size searched)."""
    out = SweepOutcome()
    hi: Optional[int] = n_freqs - 1
    best: Optional[float] = None
    for b in sorted(batch_sizes):
        if relative is not None and b not in relative:
            out.skip(SKIP_NO_R, n_freqs)  # never selectable; bounds nothing
            continue
        if hi is None:
            out.highest_feasible[b] = None
            out.skip(SKIP_INFEASIBLE, n_freqs)
            continue
        out.skip(SKIP_BOUND, n_freqs - 1 - hi)
        search = _Search(probe, feasible, near, b)
        first = search.row(hi)
        if relative is not None and best is not None and not feasible(first):
            bound = first.time_per_sample_s * relative[b]
            if bound > best:  # point 3: b cannot win, whatever its feasible clock
                out.pruned[b] = (
                    f"t(b, {first.freq_mhz:g} MHz) x r(b) = {bound * 1e3:.4g} ms is above "
                    f"the best score found, {best * 1e3:.4g} ms"
                )
                out.skip(SKIP_PRUNED, hi)
                continue  # the bound hi still holds for larger batch sizes
        good, reach = search.run(hi)
        out.highest_feasible[b] = good
        out.skip(SKIP_SEARCH, hi + 1 - len(search.rows))
        if good is not None and relative is not None:
            score = search.rows[good].time_per_sample_s * relative[b]
            best = score if best is None else min(best, score)
        hi = reach
    return out
