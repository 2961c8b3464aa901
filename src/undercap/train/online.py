"""The `online` rule on a running run (`--online`, `capped(online=True)`): at every whole
evaluation, the target's observed (samples, accuracy) prefix at the running batch size
re-weighs the proxies (select/online.py), and when the re-pooled r(b) predicts a
remaining time shorter by more than the margin at another (b, f) feasible under the cap
in force, the run switches there through the path a changing cap's switch takes
(session.Session.reselect: a segment of its own in train.json, the clock re-locked, the
loop told the batch size; the loop re-scales its learning rate by the sqrt rule and
keeps its model, optimizer state and data order).

Off by default (defaults.ONLINE): replayed on the matrix it did not beat the proxies'
median (benchmarks/results/matrix/online.md).

What the prefix means after a switch. The rule's model is about the RUNNING batch size:
it compares the target's curve at b with each proxy's recorded curve at b. A run that
switched from b0 to b1 after s0 samples has not trained s0 samples at b1; under the
progress model of train/schedule.py (each sample at b does 1 / N(b) of the work) it has
done the work of s0 r(b1) / r(b0) samples at b1. So every observed point is placed at
its b-equivalent samples, sum over the batch sizes b' it trained at of s_b' r(b) / r(b'),
with the pooled r(b) in force at the last look (the first look: the proxies' median).
Before any switch that is the samples trained, unchanged; after one, the whole prefix
is re-anchored at the new b and the rule goes on from there (tests/test_online_train.py).
A cap-driven switch, or the guard's step down on a read-only device, is re-anchored the
same way: the rule counts every step's batch size (`count`).

Feasible: the candidates under the cap in force, from the profile where the run has one
(a changing cap's re-selector), else the selection's candidates that fit the current
limit; on a read-only device no batch size at or above one the guard stepped down from.
The rule never proposes anything else, so it never breaks the cap.
"""

import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from undercap import defaults
from undercap.errors import UndercapError
from undercap.select.core import Choice, per_batch
from undercap.select.online import (
    Decision,
    Weighting,
    decide,
    pooled_relative,
    proxy_weights,
)
from undercap.select.online_data import OnlineData, from_block
from undercap.train.schedule import OperatingPoint

#: the current limit (None: no cap) -> b -> each feasible b at its best feasible clock
Feasible = Callable[[Optional[float]], Dict[int, Choice]]
#: the variant the matrix replay showed (benchmarks/results/matrix/online.md)
WEIGHTING = Weighting(defaults.ONLINE_SCHEME, "samples", defaults.ONLINE_SIGMA)


def check_eval_every(eval_every_samples: int) -> None:
    """The rule needs the target's curve at least every defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES
    samples (the coarsest rate the matrix replay measured): one line otherwise."""
    most = defaults.ONLINE_MIN_EVAL_EVERY_SAMPLES
    if eval_every_samples > most:
        raise UndercapError(
            f"--online needs an evaluation at least every {most} samples (the coarsest rate "
            f"its replay measured); --eval-every is {eval_every_samples}: lower it"
        )


def from_candidates(rows: Sequence[Mapping[str, Any]]) -> Feasible:
    """A fixed cap without a profile: the selection's candidates (each b at its best
    clock under the selection's limit) that fit the current limit with their margin."""
    cands = [Choice.from_dict(r) for r in rows]

    def feasible(limit_w: Optional[float]) -> Dict[int, Choice]:
        return {
            c.batch_size: c
            for c in cands
            if limit_w is None or c.peak_power_w + (c.power_margin_w or 0.0) <= limit_w
        }

    return feasible


def from_profile(profile: Any, batch_sizes: Sequence[int]) -> Feasible:
    """Any cap, with a profile (its margins applied): each b at its highest feasible clock."""
    rel = {b: 1.0 for b in batch_sizes}  # which clock is best at b does not depend on r(b)

    def feasible(limit_w: Optional[float]) -> Dict[int, Choice]:
        return {c.batch_size: c for c in per_batch(profile, rel, limit_w)}

    return feasible


class OnlineRule:
    """The rule's state on one run (module docstring); `state()` goes into checkpoints."""

    def __init__(
        self,
        data: OnlineData,
        target_accuracy: float,
        feasible: Feasible,
        *,
        weighting: Weighting = WEIGHTING,
        margin: float = defaults.ONLINE_MARGIN,
        saved: Optional[Dict[str, Any]] = None,
    ) -> None:
        if not 0.0 < target_accuracy <= 1.0:
            raise UndercapError("--online needs the run's target accuracy, a fraction in (0, 1]")
        self.data, self.target_accuracy, self.feasible = data, float(target_accuracy), feasible
        self.weighting, self.margin = weighting, float(margin)
        self.last: Optional[Decision] = None
        self.restore(saved or {})

    def restore(self, s: Mapping[str, Any]) -> None:
        """Continue from `state()` (a checkpoint's); an empty one starts afresh."""
        self.samples_by_batch = {int(b): int(n) for b, n in s.get("samples_by_batch", {}).items()}
        # each observed point: the samples trained at each b by then, and the accuracy
        self.points: List[Tuple[Dict[int, int], float]] = [
            ({int(b): int(n) for b, n in at.items()}, float(a)) for at, a in s.get("points", [])
        ]
        uniform = {p.name: 1.0 for p in self.data.proxies}
        saved_rel = s.get("relative")
        self.relative: Dict[int, float] = (
            {int(b): float(r) for b, r in saved_rel.items()}
            if saved_rel
            else pooled_relative(self.data.proxies, uniform)  # no evaluation yet: the median
        )
        self.switches: List[Dict[str, Any]] = list(s.get("switches", []))

    def count(self, batch_size: int, samples: int) -> None:
        """One optimizer step of `samples` at `batch_size` (the progress model's input)."""
        self.samples_by_batch[batch_size] = self.samples_by_batch.get(batch_size, 0) + samples

    def equivalent(self, at: Mapping[int, int], b: int) -> float:
        """Samples at b that did the work of `at` (module docstring), by the r(b) in force."""
        rel = self.relative
        return sum(n * rel[b] / rel[b_i] for b_i, n in at.items() if n and b_i in rel)

    def observe(
        self, accuracy: float, batch_size: int, limit_w: Optional[float], events: Sequence[Any] = ()
    ) -> Optional[Decision]:
        """One whole evaluation at the running `batch_size` under `limit_w` (the guard's
        `events` say what a read-only device stepped down from). The decision, or None
        where the running b is not one the rule can judge (no r(b) or curves for it on
        every proxy, or not feasible now)."""
        self.points.append((dict(self.samples_by_batch), float(accuracy)))
        if accuracy >= self.target_accuracy:  # the run ends here
            return None
        cands = self._candidates(limit_w, events)
        b = batch_size
        if b not in self.relative or b not in cands:
            return None
        prefix = [(self.equivalent(at, b), a) for at, a in self.points]
        d = self.data
        w = proxy_weights(
            d.proxies, b, prefix, self.target_accuracy, d.samples_bmax, self.weighting
        )
        pooled = pooled_relative(d.proxies, w.weights)
        done = self.equivalent(self.samples_by_batch, b)
        self.relative = pooled
        feasible = {k: (c.freq_mhz, c.time_per_sample_s) for k, c in cands.items()}
        self.last = decide(feasible, pooled, b, done, d.samples_bmax, self.margin)
        return self.last

    def _candidates(self, limit_w: Optional[float], events: Sequence[Any]) -> Dict[int, Choice]:
        cands = {b: c for b, c in self.feasible(limit_w).items() if b in self.relative}
        stepped = [e.from_batch_size for e in events if getattr(e, "from_batch_size", None)]
        if stepped:  # read-only: the guard measured these over the cap; stay below
            cands = {b: c for b, c in cands.items() if b < min(stepped)}
        return cands

    def operating_point(self, decision: Decision, limit_w: Optional[float]) -> OperatingPoint:
        """The (b, f) a decision moves to, as a cap-driven switch applies it."""
        c = self.feasible(limit_w)[decision.batch_size]
        return OperatingPoint(c.batch_size, c.freq_mhz, c.peak_power_w, c.power_margin_w or 0.0)

    def record(self, decision: Decision, from_b: int, samples: int, applied: bool) -> str:
        """Keep a switch (made, or only proposed where the loop cannot switch) and say it."""
        entry = {
            "samples": samples,
            "from_batch_size": from_b,
            "to_batch_size": decision.batch_size,
            "freq_mhz": decision.freq_mhz,
            "progress": decision.progress,
            "remaining_s": decision.remaining_s,
            "stay_remaining_s": decision.current_remaining_s,
            "applied": applied,
        }
        self.switches.append(entry)
        return switch_line(entry)

    def state(self) -> Dict[str, Any]:
        return {
            "samples_by_batch": {str(b): n for b, n in self.samples_by_batch.items()},
            "points": [[{str(b): n for b, n in at.items()}, a] for at, a in self.points],
            "relative": {str(b): r for b, r in self.relative.items()},
            "switches": list(self.switches),
        }


def switch_line(entry: Mapping[str, Any]) -> str:
    """One line for the progress output: the switch, and what it predicts."""
    gain = 1.0 - entry["remaining_s"] / entry["stay_remaining_s"]
    verb = "switching" if entry["applied"] else "would switch"
    return (
        f"online: {verb} b={entry['from_batch_size']} -> b={entry['to_batch_size']} at "
        f"{entry['freq_mhz']:g} MHz after {entry['samples']} samples (the target's curve so far "
        f"predicts {gain:.0%} less time to the target)"
    )


def say(bar: Any, line: str) -> None:
    """A line above the progress bar (tqdm.write) where there is one, else on stderr."""
    write = getattr(bar, "write", None)
    if write is not None:
        write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


def rule_for(
    selection: Any,
    target_accuracy: Optional[float],
    *,
    profile: Any = None,
    saved: Optional[Dict[str, Any]] = None,
    where: str = "the selection",
) -> OnlineRule:
    """The rule from a selection's online block (select/online_data.py): feasibility from
    `profile` where given (a changing cap re-selects from one), else its candidates."""
    data = from_block(selection.extra, where)
    if target_accuracy is None:
        raise UndercapError("--online needs a target accuracy (--target-accuracy)")
    common = sorted(set.intersection(*(set(p.relative) for p in data.proxies)))
    if profile is not None:
        feasible = from_profile(profile, common)
    else:
        feasible = from_candidates(selection.extra.get("candidates") or [])
    return OnlineRule(data, target_accuracy, feasible, saved=saved)
