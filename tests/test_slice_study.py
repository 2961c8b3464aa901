"""The slice study's post-hoc target rules and cells (benchmarks/slice_cells.py,
benchmarks/slice_study.py) on synthetic curves: no training, no data."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from select_helpers import make_profile

from undercap import defaults
from undercap.select import ensemble as E
from undercap.select import select_ours

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import matrix as MX  # noqa: E402
import slice_cells as SC  # noqa: E402
import slice_study as SS  # noqa: E402
from matrix_cells import make_cell, summarize  # noqa: E402


def _curve(points):  # type: ignore[no-untyped-def]
    """Accuracies at 100, 200, ... samples."""
    return [(100 * (i + 1), a) for i, a in enumerate(points)]


# b -> seed -> curve; b_max = 64 reaches bests 0.8 and 0.6 (plateau 0.7)
CURVES = {
    16: {0: _curve([0.3, 0.5, 0.6]), 1: _curve([0.2, 0.4, 0.62])},
    32: {0: _curve([0.1, 0.55, 0.7]), 1: _curve([0.1, 0.3, 0.5])},
    64: {0: _curve([0.2, 0.6, 0.8]), 1: _curve([0.1, 0.3, 0.6])},
}


def test_first_crossing_is_the_first_grid_point_at_or_above() -> None:
    n = SC.samples_to(CURVES, 0.5)
    assert n == {16: (200, 300), 32: (200, 300), 64: (200, 300)}
    assert SC.samples_to(CURVES, 0.61) == {16: (None, 300), 32: (300, None), 64: (300, None)}


def test_plateau_thresholds_and_the_capped_rule() -> None:
    assert SC.plateau(CURVES) == pytest.approx(0.7)
    assert SC.threshold("full", CURVES, 0.45) == 0.45
    assert SC.threshold("plateau-0.8", CURVES, 0.45) == pytest.approx(0.56)
    assert SC.threshold("plateau-0.9", CURVES, 0.45) == pytest.approx(0.63)
    assert SC.threshold("capped-0.95", CURVES, 0.45) == 0.45
    assert SC.threshold("capped-0.95", CURVES, 0.9) == pytest.approx(0.665)
    assert SC.product_rule() == f"capped-{defaults.SLICE_TARGET_FRACTION:g}"
    with pytest.raises(ValueError):
        SC.threshold("median", CURVES, 0.5)


def test_a_batch_size_with_a_seed_short_of_the_target_is_left_out() -> None:
    # plateau-0.8: 0.56; b=32 seed 1 peaks at 0.5 -> out; r relative to b_max = 64
    runs = SC.rule_runs(CURVES, "plateau-0.8", 0.45)
    assert runs == {16: [300, 300], 64: [200, 300]}
    rel = SC.relative(CURVES, "plateau-0.8", 0.45)
    assert rel == pytest.approx({16: 600 / 500, 64: 1.0})
    # full 0.61: b_max's seed 1 misses too -> r relative to the largest usable b
    assert SC.rule_runs(CURVES, "full", 0.61) == {}
    assert SC.relative(CURVES, "full", 0.61) is None
    assert SC.relative(CURVES, "full", 0.4) == pytest.approx({16: 0.8, 32: 1.0, 64: 1.0})
    curves = {**CURVES, 64: {0: _curve([0.1, 0.2, 0.3]), 1: _curve([0.1, 0.2, 0.3])}}
    assert SC.relative(curves, "full", 0.5) == pytest.approx({16: 1.0, 32: 1.0})


PROFILE = make_profile(
    {
        (16, 400.0): (3.0, 2.0),
        (16, 800.0): (2.0, 4.0),
        (32, 400.0): (2.0, 2.5),
        (32, 800.0): (1.2, 5.0),
        (64, 400.0): (1.5, 3.0),
        (64, 800.0): (0.8, 6.0),
    }
)


def test_cells_are_the_matrix_cells_of_algorithm_1_on_the_slice() -> None:
    samples = {16: 100.0, 32: 150.0, 64: 400.0}  # the target: b=32 is fastest at 800 MHz
    rel = {16: 0.25, 32: 0.4, 64: 1.0}
    cells = SC.cells(PROFILE, "sim:x", [None, 4.5], rel, samples, proxy="slice5-s0",
                     target="t", rule="slice")  # fmt: skip
    for c, lim in zip(cells, [None, 4.5]):
        want = make_cell(PROFILE, select_ours(PROFILE, rel, lim), samples, proxy="slice5-s0",
                         target="t", device="sim:x", power_limit_w=lim, rule="slice")  # fmt: skip
        assert c == want
    # no limit: Algorithm 1 on rel picks b=32 (1.2 * 0.4 < 2.0 * 0.25, 0.8 * 1.0)
    assert (cells[0].batch_size, cells[0].freq_mhz, cells[0].hit) == (32, 800.0, True)
    # a slice that thinks b=64 is cheap picks it: 0.8 * 400 = 320 over 1.2 * 150 = 180
    bad = SC.cells(PROFILE, "sim:x", [None], {16: 1.0, 32: 1.0, 64: 1.0}, samples,
                   proxy="p", target="t", rule="slice")[0]  # fmt: skip
    assert bad.batch_size == 64 and not bad.hit
    assert bad.gap_pct == pytest.approx(100 * (320 / 180 - 1))


def test_no_usable_r_or_nothing_feasible_is_a_missed_cell() -> None:
    samples = {16: 100.0, 32: 150.0, 64: 400.0}
    none = SC.cells(PROFILE, "sim:x", [None], None, samples, proxy="p", target="t", rule="slice")
    tight = SC.cells(PROFILE, "sim:x", [2.2], {64: 1.0}, samples, proxy="p", target="t",
                     rule="slice")  # fmt: skip
    for c in none + tight:
        assert isinstance(c, SC.NoCell) and not c.hit and c.gap_pct == math.inf
        assert list(c.to_dict()) == list(
            make_cell(PROFILE, select_ours(PROFILE, {16: 1.0}, None), samples, proxy="p",
                      target="t", device="d", power_limit_w=None, rule="r").to_dict()
        )  # fmt: skip
    s = summarize(none)[0]  # the matrix's summary counts it as the worst
    assert s.cells == 1 and s.hits == 0 and s.worst_gap_pct == math.inf
    rows = [{**c.to_dict()} for c in none] + [
        {**SC.cells(PROFILE, "sim:x", [None], {16: 0.25, 32: 0.4, 64: 1.0}, samples,
                    proxy="p", target="t", rule="slice")[0].to_dict()}
    ]  # fmt: skip
    summ = SS.summary(rows)
    assert (summ["cells"], summ["none"], summ["hits"], summ["worst"]) == (2, 1, 1, math.inf)
    assert summ["mean"] == 0.0  # over the cells with a choice


def test_the_slice_as_one_more_proxy_of_the_median() -> None:
    others = {"a": {16: 0.2, 32: 0.5, 64: 1.0}, "b": {16: 0.8, 32: 0.9, 64: 1.0}}
    slice_rel = {16: 0.3, 32: 0.4, 64: 1.0}
    choose = SC.ensemble_choice(others)
    got = choose(PROFILE, slice_rel, None)
    want = E.select_ensemble(PROFILE, {**others, "slice": slice_rel}, None).choice
    assert got == want
    assert E.combined_relative({**others, "slice": slice_rel}) == {16: 0.3, 32: 0.5, 64: 1.0}


def _eff(curves, runs, full=0.45):  # type: ignore[no-untyped-def]
    return SimpleNamespace(extra={
        "config": {"max_samples": 300},
        "curves": {str(b): {str(s): [list(p) for p in c] for s, c in per.items()}
                   for b, per in curves.items()},
        "slice": {"full_target_accuracy": full,
                  "runs": {f"{b}/{s}": r for (b, s), r in runs.items()}},
    })  # fmt: skip


def test_curves_round_trip_and_what_the_product_estimate_would_cost() -> None:
    runs = {(b, s): {"samples_trained": 300, "wall_s": 30.0} for b in CURVES for s in (0, 1)}
    eff = _eff(CURVES, runs)
    curves, budget = SC.curves_of(eff)
    assert curves == CURVES and budget == 300
    assert SC.eff_relative(eff, "plateau-0.8") == SC.relative(CURVES, "plateau-0.8", 0.45)
    assert SC.whole_cost(eff) == {"samples": 1800, "wall_s": 180.0}
    # capped-0.95 (here the full target, 0.45): b_max's runs go the whole budget (the
    # plateau needs them); the others stop at N_s(b): b=16 at 200 and 300, b=32 at 200, 300
    cost = SC.product_cost(eff, "capped-0.95")
    assert cost["samples"] == 600 + (200 + 300) + (200 + 300)
    assert cost["wall_s"] == pytest.approx(cost["samples"] / 10)
    # full (absolute, 0.45): b_max stops at its target as well (200, 300)
    assert SC.product_cost(eff, "full")["samples"] == 500 + 500 + 500
    # a run that never reaches costs the whole budget (plateau-0.8, 0.56: b=32 seed 1)
    assert SC.product_cost(eff, "plateau-0.8")["samples"] == 600 + 600 + 600
    per = SC.per_sample_wall(eff)
    assert per == {16: 0.1, 32: 0.1, 64: 0.1}
    full = SimpleNamespace(samples_to_target={16: (100, 200), 64: (300, None)},
                           extra={"cost": {"samples_trained": 600, "wall_s": 99.0}})  # fmt: skip
    assert SC.full_cost(full, per) == {"samples": 600, "wall_s": 99.0, "wall_s_here": 60.0}
    assert SC.full_cost(full)["wall_s_here"] is None


def test_names_paths_and_the_order_of_the_study() -> None:
    assert [SC.pct(f) for f in (0.05, 0.1, 0.25, 1.0)] == ["5", "10", "25", "100"]
    assert SC.slice_label(0.05, 1) == "slice5-s1"
    path = SC.artifact_path(Path("R"), "image", "digits", 0.1, 0)
    assert path == Path("R/efficiency/image-digits-slice10-s0.json")
    order = SS.plan([0.05, 0.1, 0.25, 1.0], [0, 1])
    assert order[0] == (defaults.SLICE_FRACTION, 0) and (1.0, 1) not in order
    assert len(order) == 7 and order.index((1.0, 0)) < order.index((0.05, 1))
    # a partial study names what it holds: sizes in numeric order, per target and seed
    done = [("milton", "10", 0), ("austen", "100", 0), ("austen", "5", 0), ("austen", "25", 1)]
    assert SS.stored(done) == "austen seed 0: 5%, 100%; austen seed 1: 25%; milton seed 0: 10%"


def test_the_matrix_slice_rules_and_their_plan() -> None:
    args = MX.parse_args([])
    assert not args.no_slices and args.slice_seeds == [0, 1]
    plan = MX.slice_plan(args)
    assert list(plan) == list(MX.slice_rules()) == ["slice", "slice-5", "slice-10", "slice-25",
                                                     "slice-100"]  # fmt: skip
    assert plan["slice"] == (defaults.SLICE_FRACTION, [0, 1])
    assert plan["slice-100"] == (1.0, [0]) and plan["slice-5"] == (0.05, [0, 1])


def test_the_matrix_keeps_the_stored_slice_estimates_of_a_partial_study(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A study under way: the stored estimates give rows, the missing ones none, and the
    tables say how many of the planned ones they hold; none stored: no slice rules."""
    import shutil

    stored = Path(__file__).resolve().parents[1] / "benchmarks/results/slice/efficiency"
    name = "text-shakespeare-slice10-s0.json"
    (tmp_path / "efficiency").mkdir()
    args = MX.parse_args(["--estimates-from", str(tmp_path)])
    mod = SimpleNamespace(name="text")
    assert MX.slice_estimates(mod, ["shakespeare", "milton"], args, None, None) == {}
    shutil.copy(stored / name, tmp_path / "efficiency" / name)
    got = MX.slice_estimates(mod, ["shakespeare", "milton"], args, None, None)
    assert list(got["estimates"]) == [("shakespeare", 0.1, 0)]
    assert got["planned"] == 2 * 7  # 5, 10, 25 at seeds 0 and 1; the control at seed 0
    assert MX._slices_stored(got) == "; 1 of the 14 slice estimates stored, the rest left out"
    assert MX._slices_stored({"estimates": {1: 0}, "planned": 1}) == ""
