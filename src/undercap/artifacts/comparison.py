"""Result records of a comparison (baselines vs ours vs oracle) and their statistics:
pure data and arithmetic (no torch), so reports and tests work on records alone.

One comparison = one model, one proxy and one target dataset, one device, several
power limits and several seeds. For every limit each method picks a configuration
(`ChoiceRecord`), trained on the target on the device once per seed (`RunRecord`); an
identical configuration is trained once and shared (`RunRecord.shared_from`).

Statistics (paper Tables 2-4): per method and limit the mean and sample standard
deviation over seeds of time-to-accuracy and energy; the speed-up over Baseline 1 (and
2) is mean T(baseline) / mean T(method); the gap to the oracle is (mean T(method) /
mean T(oracle) - 1) in percent. A run that missed the target is left out of the means
and counted (`n_reached` < `n_runs`); so is one whose robust peak went above its limit
(`limit_exceeded`, `n_over_limit`), whatever its time: a table never hides either.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Optional, Tuple

from undercap.artifacts.io import check_schema, from_fields
from undercap.errors import ArtifactError

COMPARISON_SCHEMA = "undercap.comparison/1"
METHODS = ("baseline1", "baseline2", "ours", "oracle")
METHOD_LABELS = {
    "baseline1": "Baseline 1",
    "baseline2": "Baseline 2",
    "ours": "Ours",
    "oracle": "Oracle",
}


def limit_label(power_limit_w: Optional[float]) -> str:
    """'5 W', '7.5 W' or 'none'."""
    return "none" if power_limit_w is None else f"{power_limit_w:g} W"


def limit_sort_key(power_limit_w: Optional[float]) -> float:
    """Tight limits first, 'none' (no limit) last."""
    return math.inf if power_limit_w is None else float(power_limit_w)


@dataclass(frozen=True)
class ChoiceRecord:
    """What one method picked for one power limit (from select.Choice)."""

    method: str
    power_limit_w: Optional[float]
    batch_size: int
    freq_mhz: float
    time_per_sample_s: float  # profiled t(b, f)
    peak_power_w: float  # profiled P(b, f)
    relative_samples: Optional[float]  # r(b) the method used (None: not used, Baseline 1)
    safe_freq_mhz: Optional[float] = None  # the baselines' frequency cap; None for ours/oracle
    precision: str = "fp32"  # the arithmetic of the profile rows it picked from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChoiceRecord:
        return from_fields(cls, d, may_lack=("relative_samples",))


@dataclass(frozen=True)
class RunRecord:
    """One method's configuration trained on the target on the device for one seed."""

    method: str
    power_limit_w: Optional[float]
    seed: int
    batch_size: int
    freq_mhz: float  # the frequency the run started at (the method's choice)
    reached: bool
    time_to_accuracy_s: Optional[float]  # device training time to the target; None: not reached
    energy_j: Optional[float]  # device energy over the same training time
    peak_power_w: float
    mean_power_w: float
    samples_to_target: Optional[int]
    samples_trained: int
    final_accuracy: float
    guard_events: int = 0  # times the power guard stepped the frequency down
    final_freq_mhz: Optional[float] = None
    train_s: Optional[float] = None  # device training time actually spent (to target or budget)
    shared_from: Optional[str] = None  # "method@limit" whose identical run this reuses
    limit_exceeded: bool = False  # robust peak above the power limit: a failed run
    precision: str = "fp32"  # the arithmetic it trained in

    @property
    def succeeded(self) -> bool:
        """Reached the target without exceeding the limit (what the means count)."""
        return self.reached and not self.limit_exceeded

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        return from_fields(cls, d, may_lack=("energy_j", "samples_to_target"))


@dataclass(frozen=True)
class Comparison:
    """Everything one comparison produced; round-trips through JSON."""

    device: str
    simulated: bool
    model: str
    proxy: str
    target: str
    target_accuracy: float
    # typing's generics: from_fields reads these annotations (Python 3.8 too)
    power_limits_w: Tuple[Optional[float], ...]
    seeds: Tuple[int, ...]
    choices: Tuple[ChoiceRecord, ...]
    runs: Tuple[RunRecord, ...]
    settings: Dict[str, Any] = field(default_factory=dict)
    provenance: Dict[str, Any] = field(default_factory=dict)

    @property
    def methods(self) -> tuple[str, ...]:
        present = {c.method for c in self.choices} | {r.method for r in self.runs}
        return tuple(m for m in METHODS if m in present) + tuple(sorted(present - set(METHODS)))

    def choice(self, method: str, power_limit_w: Optional[float]) -> Optional[ChoiceRecord]:
        mine = (c for c in self.choices if (c.method, c.power_limit_w) == (method, power_limit_w))
        return next(mine, None)

    def runs_for(self, method: str, power_limit_w: Optional[float]) -> list[RunRecord]:
        return [r for r in self.runs if r.method == method and r.power_limit_w == power_limit_w]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        tail = {k: d.pop(k) for k in ("settings", "provenance")}  # after the summary
        return {
            "schema": COMPARISON_SCHEMA,
            **d,
            "summary": [s.to_dict() for s in summarize(self)],
            **tail,
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], path: str = "<comparison>") -> Comparison:
        check_schema(obj, COMPARISON_SCHEMA, path, hint="")
        try:
            return from_fields(cls, obj)
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"{path}: malformed comparison record ({e!r})") from e


# --- statistics -----------------------------------------------------------------------
@dataclass(frozen=True)
class Stat:
    mean: Optional[float]  # None when no value
    std: Optional[float]  # sample std (n - 1); None with fewer than two values
    n: int


def stat(values: Iterable[Optional[float]]) -> Stat:
    """Mean and sample standard deviation of the values that are not None."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return Stat(None, None, 0)
    return Stat(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else None, len(xs))


def speedup(baseline_mean_s: Optional[float], method_mean_s: Optional[float]) -> Optional[float]:
    """How many times faster the method is than the baseline (> 1: faster)."""
    if baseline_mean_s is None or method_mean_s is None or method_mean_s <= 0:
        return None
    return baseline_mean_s / method_mean_s


def gap_pct(method_mean_s: Optional[float], oracle_mean_s: Optional[float]) -> Optional[float]:
    """How much slower than the oracle the method is, in percent (0: matches it)."""
    if method_mean_s is None or oracle_mean_s is None or oracle_mean_s <= 0:
        return None
    return (method_mean_s / oracle_mean_s - 1.0) * 100.0


@dataclass(frozen=True)
class SummaryRow:
    """One method at one power limit, over seeds."""

    method: str
    power_limit_w: Optional[float]
    batch_size: Optional[int]
    freq_mhz: Optional[float]
    n_runs: int
    n_reached: int
    time_mean_s: Optional[float]
    time_std_s: Optional[float]
    energy_mean_j: Optional[float]
    energy_std_j: Optional[float]
    peak_power_max_w: Optional[float]  # highest robust peak over the seeds
    guard_events: int
    speedup_vs_baseline1: Optional[float]
    speedup_vs_baseline2: Optional[float]
    gap_to_oracle_pct: Optional[float]
    n_over_limit: int = 0  # runs whose robust peak went above the limit (failed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(comparison: Comparison) -> list[SummaryRow]:
    """One SummaryRow per (power limit, method), limits tight to loose."""
    rows: list[SummaryRow] = []
    for limit in sorted(comparison.power_limits_w, key=limit_sort_key):
        means = {m: _reached_time(comparison.runs_for(m, limit)).mean for m in comparison.methods}
        for m in comparison.methods:
            rows.append(_summary_row(comparison, m, limit, means))
    return rows


def _reached_time(runs: Sequence[RunRecord]) -> Stat:
    return stat(r.time_to_accuracy_s for r in runs if r.succeeded)


def _summary_row(
    comparison: Comparison,
    method: str,
    limit: Optional[float],
    means: Mapping[str, Optional[float]],
) -> SummaryRow:
    runs = comparison.runs_for(method, limit)
    t = _reached_time(runs)
    e = stat(r.energy_j for r in runs if r.succeeded)
    choice = comparison.choice(method, limit)
    return SummaryRow(
        method=method,
        power_limit_w=limit,
        batch_size=choice.batch_size if choice else (runs[0].batch_size if runs else None),
        freq_mhz=choice.freq_mhz if choice else (runs[0].freq_mhz if runs else None),
        n_runs=len(runs),
        n_reached=sum(r.reached for r in runs),
        time_mean_s=t.mean,
        time_std_s=t.std,
        energy_mean_j=e.mean,
        energy_std_j=e.std,
        peak_power_max_w=max((r.peak_power_w for r in runs), default=None),
        guard_events=sum(r.guard_events for r in runs),
        speedup_vs_baseline1=speedup(means.get("baseline1"), t.mean),
        speedup_vs_baseline2=speedup(means.get("baseline2"), t.mean),
        gap_to_oracle_pct=gap_pct(t.mean, means.get("oracle")),
        n_over_limit=sum(r.limit_exceeded for r in runs),
    )


def summary_for(
    rows: Sequence[SummaryRow], method: str, limit: Optional[float]
) -> Optional[SummaryRow]:
    return next((r for r in rows if (r.method, r.power_limit_w) == (method, limit)), None)
