"""The race on the target (select/race.py) against brute forces written from the rule's
text, on random and on recorded learning curves (the matrix's stored estimates)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from select_helpers import make_profile

from undercap.errors import InfeasibleError, UndercapError
from undercap.select import race as R
from undercap.select import select_ours
from undercap.select.ensemble import select_ensemble

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BS, FS = (8, 16, 32, 64), (100.0, 200.0, 400.0)
CURVES = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "matrix" / "efficiency"


# --- brute forces ----------------------------------------------------------------------------
def brute_judge(curves, target, budget, margin):  # type: ignore[no-untyped-def]
    """Simulate the race lane by lane, point by point, as the docstring tells it."""
    last = []
    for i, curve in enumerate(curves):
        score = None
        for t, _n, acc in curve:
            if t > budget:
                break
            if acc >= target:
                return i, t
            score = acc
        last.append(score)
    if all(s is None for s in last):
        return 0, None
    # the favourite keeps it unless a challenger is more accurate by more than the margin
    fav = -math.inf if last[0] is None else last[0]
    winner, best = 0, fav + margin
    for i, s in enumerate(last[1:], start=1):
        if s is not None and s > best:
            winner, best = i, s
    return winner, None


def brute_candidates(profile, proxies, limit, k):  # type: ignore[no-untyped-def]
    fav = select_ensemble(profile, proxies, limit).choice
    picks = {select_ours(profile, r, limit).batch_size for r in proxies.values()} | {fav.batch_size}
    med = select_ensemble(profile, proxies, limit).relative
    top = {}
    feasible = [r for r in profile.rows if limit is None or r.peak_power_w <= limit]
    for r in feasible:
        if r.batch_size in picks and (
            r.batch_size not in top or r.freq_mhz > top[r.batch_size].freq_mhz
        ):
            top[r.batch_size] = r
    order = sorted(top, key=lambda b: (top[b].time_per_sample_s * med[b], -b))
    return [(b, top[b].freq_mhz) for b in order][:k]


# --- strategies ---------------------------------------------------------------------------------
# Accuracies and margins on a grid of eighths: sums and comparisons are exact in binary
# floating point, so no case hinges on a rounding tie.
ACC = st.integers(0, 8).map(lambda i: i / 8)


@st.composite
def curves(draw):  # type: ignore[no-untyped-def]
    lanes = []
    for _ in range(draw(st.integers(1, 4))):
        step = draw(st.sampled_from([0.5, 1.0, 1.5]))
        accs = draw(st.lists(ACC, max_size=8))
        lanes.append([(step * (j + 1), 64 * (j + 1), a) for j, a in enumerate(accs)])
    return lanes


@st.composite
def profiles(draw):  # type: ignore[no-untyped-def]
    val = st.sampled_from([1.0, 2.0, 3.0, 4.0])
    table = {}
    for b in BS:
        for i, f in enumerate(FS):
            table[(b, f)] = (draw(val) * 1e-3 / (i + 1), 1.0 + i + b / 32 + draw(val) / 10)
    proxies = {}
    for k in range(draw(st.integers(1, 5))):
        proxies[f"p{k}"] = {b: draw(st.sampled_from([0.25, 0.5, 0.75, 1.0])) for b in BS}
    limit = draw(st.one_of(st.none(), st.sampled_from([2.0, 3.0, 4.0, 6.0])))
    return make_profile(table), proxies, limit


# --- the judge ---------------------------------------------------------------------------------
@SETTINGS
@given(curves(), ACC, st.sampled_from([0.0, 1.0, 2.5, 4.0, 100.0]), st.sampled_from([0, 0.125]))
def test_judge_matches_brute_force(lanes, target, budget, margin) -> None:  # type: ignore[no-untyped-def]
    v = R.judge(lanes, target, budget, margin)
    assert (v.index, v.reached) == brute_judge(lanes, target, budget, margin)
    spent = R.spent_in_race(v, budget, len(lanes))
    # the losers' time is the cost; the winner's is its own training, kept
    assert R.race_cost(v, spent) == pytest.approx(sum(spent) - spent[v.index])
    if v.reached is not None:  # nobody after the winner ran
        assert all(s == 0 for s in spent[v.index + 1 :]) and spent[v.index] == v.reached


def _recorded(name: str, b: int, seed: int, time_per_sample_s: float):  # type: ignore[no-untyped-def]
    eff = json.loads((CURVES / f"{name}.json").read_text())
    pts = eff["curves"][str(b)][str(seed)]
    return [(time_per_sample_s * n, n, a) for n, a in pts], eff["target_accuracy"]


@pytest.mark.parametrize("name", ["image-digits", "text-shakespeare", "image-cifar-a"])
@pytest.mark.parametrize("budget", [0.0, 0.3, 1.0, 3.0, 10.0, 1e6])
def test_judge_on_recorded_curves(name: str, budget: float) -> None:
    """The matrix's stored curves (b = 32 and 64, every seed), timed as on a device
    where b = 32 takes 1.5x the time per sample of b = 64."""
    for seed in range(3):
        a, target = _recorded(name, 64, seed, 1e-4)
        b, _ = _recorded(name, 32, seed, 1.5e-4)
        for margin in (0.0, 0.01):
            v = R.judge([a, b], target, budget, margin)
            assert (v.index, v.reached) == brute_judge([a, b], target, budget, margin)
    # with an unbounded budget the favourite runs to its target and wins there
    v = R.judge([a, b], target, 1e6)
    assert v.index == 0 and v.reached == a[-1][0] and v.why == "reached the target"


def test_judge_edge_cases() -> None:
    fav = [(1.0, 64, 0.5), (2.0, 128, 0.6)]
    ch = [(1.0, 32, 0.55), (2.0, 64, 0.7)]
    assert R.judge([fav, ch], 0.9, 2.0).index == 1  # more accurate at the end
    assert R.judge([fav, ch], 0.9, 2.0, margin=0.125).index == 0  # not by the margin
    assert R.judge([fav, ch], 0.9, 0.5).why.startswith("no evaluation")
    assert R.judge([[], ch], 0.9, 2.0).index == 1  # the favourite never evaluated
    v = R.judge([fav, ch], 0.6, 5.0)  # the favourite reaches 0.6 first: the challenger never runs
    assert (v.index, v.reached, v.scores) == (0, 2.0, (0.6, None))


# --- the plan ----------------------------------------------------------------------------------
@SETTINGS
@given(profiles(), st.integers(1, 4), st.sampled_from([0.0, 0.1]))
def test_plan_matches_brute_force(case, k, fraction) -> None:  # type: ignore[no-untyped-def]
    profile, proxies, limit = case
    try:
        fav = select_ensemble(profile, proxies, limit).choice
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            R.plan_race(profile, proxies, limit, samples_bmax=1000, fraction=fraction)
        return
    plan = R.plan_race(
        profile, proxies, limit, samples_bmax=1000, fraction=fraction, max_candidates=k
    )
    got = [(c.batch_size, c.freq_mhz) for c in plan.candidates]
    assert got == brute_candidates(profile, proxies, limit, k)
    assert got[0] == (fav.batch_size, fav.freq_mhz)  # the favourite is the median's choice
    assert plan.predicted_s == pytest.approx(fav.score * 1000)
    assert plan.budget_s == pytest.approx(fraction * fav.score * 1000)
    if len(proxies) == 1 or fraction == 0:
        assert not plan.needed  # one proxy cannot disagree with itself; budget 0 is off


def test_plan_races_what_the_proxies_disagree_on() -> None:
    # b=16 at 1.0 ms/sample, b=32 at 0.6 ms/sample; proxy a prefers 16, b and c prefer 32
    profile = make_profile({(16, 100.0): (1e-3, 2.0), (32, 100.0): (0.6e-3, 3.0)})
    proxies = {"a": {16: 0.4, 32: 1.0}, "b": {16: 0.9, 32: 1.0}, "c": {16: 0.8, 32: 1.0}}
    plan = R.plan_race(profile, proxies, None, samples_bmax=1e4, fraction=0.1)
    assert [c.batch_size for c in plan.candidates] == [32, 16]
    assert plan.needed and plan.budget_s == pytest.approx(0.1 * 0.6e-3 * 1e4)
    assert "racing b=32" in plan.reason and plan.to_dict()["candidates"][1]["batch_size"] == 16
    agree = {"b": proxies["b"], "c": proxies["c"]}
    plan = R.plan_race(profile, agree, None, samples_bmax=1e4, fraction=0.1)
    assert not plan.needed and plan.reason.startswith("one candidate")
    assert not R.plan_race(profile, agree, 2.5, samples_bmax=1e4, fraction=0.1).needed


def test_bad_settings_are_refused() -> None:
    profile = make_profile({(16, 100.0): (1e-3, 2.0)})
    for kw in ({"fraction": 1.5}, {"fraction": -0.1}, {"fraction": 0.1, "margin": 2.0},
               {"fraction": 0.1, "max_candidates": 0}):  # fmt: skip
        with pytest.raises(UndercapError):
            R.plan_race(profile, {"a": {16: 1.0}}, None, samples_bmax=10, **kw)
