"""A comparison as CSV: one row per method x limit x seed (runs.csv) and one per
method x limit (summary.csv), both loadable straight into pandas (empty cell =
missing), with a `simulated` column where the device is simulated.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from undercap.artifacts.comparison import (
    Comparison,
    RunRecord,
    limit_label,
    limit_sort_key,
    summarize,
)

# The scenario's columns (_scenario_fields) and the cell's, first in both files.
_LEAD_COLUMNS = (
    "device",
    "simulated",
    "model",
    "proxy",
    "target",
    "target_accuracy",
    "method",
    "power_limit",
    "power_limit_w",
)
RUN_COLUMNS = (
    *_LEAD_COLUMNS,
    "seed",
    "batch_size",
    "freq_mhz",
    "reached",
    "time_to_accuracy_s",
    "energy_j",
    "peak_power_w",
    "mean_power_w",
    "samples_to_target",
    "samples_trained",
    "final_accuracy",
    "guard_events",
    "final_freq_mhz",
    "train_s",
    "shared_from",
    "limit_exceeded",
)
SUMMARY_COLUMNS = (
    *_LEAD_COLUMNS,
    "batch_size",
    "freq_mhz",
    "n_runs",
    "n_reached",
    "time_mean_s",
    "time_std_s",
    "energy_mean_j",
    "energy_std_j",
    "peak_power_max_w",
    "guard_events",
    "speedup_vs_baseline1",
    "speedup_vs_baseline2",
    "gap_to_oracle_pct",
    "n_over_limit",
)


def _csv_value(x: Any) -> Any:
    if x is None:
        return ""
    if isinstance(x, bool):
        return int(x)
    return x


def _scenario_fields(c: Comparison) -> dict[str, Any]:
    return {
        "device": c.device,
        "simulated": c.simulated,
        "model": c.model,
        "proxy": c.proxy,
        "target": c.target,
        "target_accuracy": c.target_accuracy,
    }


def _csv_text(columns: Sequence[str], records: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({k: _csv_value(rec.get(k)) for k in columns})
    return buf.getvalue()


def runs_csv(c: Comparison) -> str:
    """One row per method x limit x seed."""
    base = _scenario_fields(c)
    ordered = sorted(
        c.runs, key=lambda r: (limit_sort_key(r.power_limit_w), _method_index(c, r), r.seed)
    )
    return _csv_text(
        RUN_COLUMNS,
        [{**base, **r.to_dict(), "power_limit": limit_label(r.power_limit_w)} for r in ordered],
    )


def _method_index(c: Comparison, r: RunRecord) -> int:
    return c.methods.index(r.method)


def summary_csv(c: Comparison) -> str:
    """One row per method x limit: mean/std time and energy, speed-ups, gap."""
    base = _scenario_fields(c)
    return _csv_text(
        SUMMARY_COLUMNS,
        [
            {**base, **s.to_dict(), "power_limit": limit_label(s.power_limit_w)}
            for s in summarize(c)
        ],
    )
