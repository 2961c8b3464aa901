"""What every benchmark shares: where things are, a stopwatch, markdown tables and
atomic result files. Plain functions, no framework: a script imports what it needs.

    import harness as H            # a script in benchmarks/
    H.RESULTS / "overhead.md"      # where results go
    if not H.have_data(args.data_dir): return 0   # no data: one line, exit 0

Scripts in benchmarks/research/ put benchmarks/ on sys.path first (one line) and then
import it the same way.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"
#: the estimate and profile runs the benchmarks share (the matrix, compare, ...): a re-run
#: of any of them reuses what another one trained
CACHE = Path.home() / ".cache" / "undercap-bench"

# The source tree first, so that a script runs this checkout's undercap even where the
# venv has none installed or an older copy (the GPU scripts run from the tree, no install).
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))


def shared_data() -> Path:
    """The data folder (datasets, measured power, solar days): the one named by
    $UNDERCAP_DATA_DIR, else $UNDERCAP_SHARED_DATA (older setups), else data/ in the
    repository (what scripts/make_data.py writes) where it exists, else ../shared/data
    beside the repository."""
    for var in ("UNDERCAP_DATA_DIR", "UNDERCAP_SHARED_DATA"):
        if os.environ.get(var):
            return Path(os.environ[var])
    if (REPO / "data").is_dir():
        return REPO / "data"
    return REPO.parent / "shared" / "data"


DATA = shared_data()


def have_data(folder: Path) -> bool:
    """Whether the data folder is there; if not, one line says so. A benchmark without its
    data is skipped (exit 0), not failed: CI and fresh checkouts have none."""
    if Path(folder).is_dir():
        return True
    print(
        f"skipped: no data at {folder} "
        "(make it with: python scripts/make_data.py all; or set UNDERCAP_DATA_DIR)"
    )
    return False


def stopwatch() -> Callable[[], float]:
    """A function that returns the seconds since stopwatch() was called (perf_counter:
    monotonic, and the finest clock there is)."""
    t0 = time.perf_counter()
    return lambda: time.perf_counter() - t0


def md_table(
    header: Sequence[Any],
    rows: Iterable[Sequence[Any]],
    fmt: Sequence[str | Callable[[Any], str] | None] | None = None,
    align: str = "---",
) -> str:
    """A GitHub markdown table (no trailing newline). `fmt`: per column a format string
    ("{:.1f}"), a function, or None for str(); the caller decides every number's digits,
    so a table stays byte for byte what its script printed before. `align`: the
    separator cell ("---:" right-aligns every column)."""
    fmt = list(fmt or [])

    def cell(i: int, v: Any) -> str:
        f = fmt[i] if i < len(fmt) else None
        if f is None:
            return str(v)
        return f.format(v) if isinstance(f, str) else f(v)

    def line(cells: Iterable[str]) -> str:  # an empty cell is "| |", as typed by hand
        return "|" + "".join(f" {c} |" if c else " |" for c in cells)

    lines = [line(str(h) for h in header), "|" + f"{align}|" * len(header)]
    lines += [line(cell(i, v) for i, v in enumerate(r)) for r in rows]
    return "\n".join(lines)


# --- results: written atomically, so a run killed half-way never leaves half a file ----
def write_text(path: Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically, making its folder."""
    from undercap.artifacts.io import write_atomic

    return write_atomic(path, text)


def write_json(path: Path, obj: Any, indent: int = 2) -> Path:
    """`obj` as JSON plus a newline, atomically; NaN and infinities are refused (they are
    not JSON). indent=2 is undercap's own save_json layout; most results use 1."""
    return write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")


def csv_text(
    rows: Iterable[Mapping[str, Any]] | Iterable[Sequence[Any]],
    header: Sequence[str] | None = None,
    lineterminator: str = "\n",
) -> str:
    """CSV of dict rows (the columns: `header`, else the first row's keys) or of plain
    rows under `header`."""
    rows = list(rows)
    buf = io.StringIO()
    if rows and isinstance(rows[0], Mapping):
        fields = list(header or rows[0])
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator=lineterminator)
        w.writeheader()
        w.writerows(rows)  # type: ignore[arg-type]
    else:
        w2 = csv.writer(buf, lineterminator=lineterminator)
        if header is not None:
            w2.writerow(header)
        w2.writerows(rows)
    return buf.getvalue()


def write_csv(path: Path, rows: Any, header: Sequence[str] | None = None, **kw: Any) -> Path:
    """csv_text(rows, header) written atomically."""
    return write_text(path, csv_text(rows, header, **kw))
