"""The proxy-sensitivity matrix's cells (benchmarks/matrix_cells.py) against brute forces."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from select_helpers import figure1_profile, make_profile

from undercap.select import oracle, select_ours

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from matrix_cells import Cell, fastest, grid, make_cell, plot_matrix, summarize  # noqa: E402

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
samples_st = st.fixed_dictionaries({b: st.floats(100.0, 10_000.0) for b in (8, 16, 32, 64)})


@SETTINGS
@given(samples_st, samples_st, st.one_of(st.none(), st.floats(2.5, 9.0)))
def test_cell_against_brute_force(n_proxy, n_target, limit) -> None:  # type: ignore[no-untyped-def]
    profile = figure1_profile()
    feasible = [r for r in profile.rows if limit is None or r.peak_power_w <= limit]
    if not feasible:
        return
    rel = {b: n / n_proxy[64] for b, n in n_proxy.items()}
    choice = select_ours(profile, rel, limit)
    cell = make_cell(profile, choice, n_target, proxy="P", target="T", device="d",
                     power_limit_w=limit, rule="paper")  # fmt: skip
    # brute force: every feasible (b, f), time t * N_T(b)
    best = min(r.time_per_sample_s * n_target[r.batch_size] for r in feasible)
    assert cell.fastest_time_s == pytest.approx(best)
    chosen = next(
        r for r in feasible if (r.batch_size, r.freq_mhz) == (choice.batch_size, choice.freq_mhz)
    )
    assert cell.time_s == pytest.approx(chosen.time_per_sample_s * n_target[chosen.batch_size])
    assert cell.gap_pct >= -1e-9
    # t falls with f here, so the fastest is Algorithm 1 with the target's own r(b)
    own = oracle(profile, {b: n / n_target[64] for b, n in n_target.items()}, limit)
    assert (cell.fastest_batch_size, cell.fastest_freq_mhz) == (own.batch_size, own.freq_mhz)


def test_fastest_looks_at_every_row_not_only_the_top_clock() -> None:
    # at b=16 the lower clock is faster (a profile quirk): the fastest must find it
    profile = make_profile(
        {(16, 400.0): (1.0, 3.0), (16, 800.0): (1.2, 3.5), (32, 800.0): (0.9, 3.5)}
    )
    row, t = fastest(profile, {16: 100.0, 32: 200.0}, None)
    assert (row.batch_size, row.freq_mhz, t) == (16, 400.0, 100.0)
    row, t = fastest(profile, {16: 100.0, 32: 200.0}, 3.2)
    assert (row.batch_size, row.freq_mhz) == (16, 400.0)


def _cell(p: str, t: str, time_s: float, lim=None, rule="paper") -> Cell:  # type: ignore[no-untyped-def]
    return Cell(p, t, "sim:x", lim, rule, 16, 100.0, time_s, 16, 100.0, 10.0)


def test_summary_counts_hits_and_the_worst_off_diagonal_cell() -> None:
    cells = [
        _cell("a", "a", 30.0),
        _cell("a", "b", 10.0),
        _cell("b", "a", 10.2),
        _cell("a", "c", 11.0),
    ]
    (s,) = summarize(cells)
    assert (s.cells, s.hits, s.within_3pct) == (3, 1, 2)
    assert s.worst == "a -> c" and s.worst_gap_pct == pytest.approx(10.0)
    (s_all,) = summarize(cells, off_diagonal=False)
    assert s_all.worst == "a -> a" and s_all.cells == 4
    by_rule = summarize([*cells, _cell("a", "b", 12.0, rule="spread")])
    assert {x.rule for x in by_rule} == {"paper", "spread"}


def test_grid_and_figure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    names = ["a", "b", "c"]
    cells = [_cell(p, t, 10.0 + i) for i, (p, t) in enumerate(itertools.product(names, names))]
    g = grid(cells, names)
    assert g[0][1] == pytest.approx(10.0) and g[2][2] == pytest.approx(80.0)
    path = plot_matrix([("x", cells), ("y", cells[:4])], names, tmp_path / "m.png", title="t")
    assert path.stat().st_size > 1000
