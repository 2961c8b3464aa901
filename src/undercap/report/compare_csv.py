"""A comparison as CSV: one row per method x limit x seed (runs.csv) and one per
method x limit (summary.csv), both loadable straight into pandas (empty cell =
missing), with a `simulated` column where the device is simulated.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from undercap.artifacts.comparison import (
    Comparison,
    RunRecord,
    SummaryRow,
    limit_label,
    limit_sort_key,
    summarize,
)

# The scenario's columns and the cell's, first in both files; then the record's own
# fields (a run's precision is not a column)
_SCENARIO = ("device", "simulated", "model", "proxy", "target", "target_accuracy")
_LEAD_COLUMNS = (*_SCENARIO, "method", "power_limit", "power_limit_w")
RUN_COLUMNS = _LEAD_COLUMNS + tuple(
    f.name for f in fields(RunRecord) if f.name not in (*_LEAD_COLUMNS, "precision")
)
SUMMARY_COLUMNS = _LEAD_COLUMNS + tuple(
    f.name for f in fields(SummaryRow) if f.name not in _LEAD_COLUMNS
)


def _csv_value(x: Any) -> Any:
    if x is None:
        return ""
    if isinstance(x, bool):
        return int(x)
    return x


def _csv_text(c: Comparison, columns: Sequence[str], records: Sequence[Any]) -> str:
    """The records (RunRecord or SummaryRow), each after the scenario's columns."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    scenario = {k: getattr(c, k) for k in _SCENARIO}
    for rec in records:
        row = {**scenario, **rec.to_dict(), "power_limit": limit_label(rec.power_limit_w)}
        writer.writerow({k: _csv_value(row.get(k)) for k in columns})
    return buf.getvalue()


def runs_csv(c: Comparison) -> str:
    """One row per method x limit x seed."""
    ordered = sorted(
        c.runs, key=lambda r: (limit_sort_key(r.power_limit_w), c.methods.index(r.method), r.seed)
    )
    return _csv_text(c, RUN_COLUMNS, ordered)


def summary_csv(c: Comparison) -> str:
    """One row per method x limit: mean/std time and energy, speed-ups, gap."""
    return _csv_text(c, SUMMARY_COLUMNS, summarize(c))
