"""Spread-aware and noise-scale selection rules (select/robust.py) against brute forces."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from select_helpers import figure1_profile, make_profile

from undercap.errors import InfeasibleError
from undercap.select import robust as R
from undercap.select import select_ours

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- brute forces written from the rule's text, not from the module ----------------------
def brute_spread(profile, rel, spread, limit, k):  # type: ignore[no-untyped-def]
    """Every feasible row; keep each b's highest feasible f; mean score s, standard
    error, worst case; the near-best set; smallest worst, then s, larger b, higher f."""
    feas = [
        r
        for r in profile.rows
        if r.batch_size in rel and (limit is None or r.peak_power_w <= limit)
    ]
    top = {}
    for r in feas:
        if r.batch_size not in top or r.freq_mhz > top[r.batch_size].freq_mhz:
            top[r.batch_size] = r
    if not top:
        return None
    stats = {}
    for b, r in top.items():
        s = spread.get(b) if spread else None
        t = r.time_per_sample_s
        if s is None or s["n"] < 2:
            stats[b] = (t * rel[b], 0.0, t * rel[b])
        else:
            stats[b] = (t * rel[b], t * s["std"] / math.sqrt(s["n"]), t * max(rel[b], s["max"]))
    best = min(top, key=lambda b: (stats[b][0], -b))
    near = [
        b
        for b in top
        if stats[b][0] - stats[best][0] <= k * math.hypot(stats[b][1], stats[best][1]) + 1e-15
    ]
    pick = min(near, key=lambda b: (stats[b][2], stats[b][0], -b))
    return pick, top[pick].freq_mhz


@st.composite
def spread_case(draw):  # type: ignore[no-untyped-def]
    bs = draw(st.lists(st.sampled_from((8, 16, 32, 64)), min_size=1, max_size=4, unique=True))
    rel, spread = {}, {}
    for b in bs:
        seeds = draw(st.lists(st.floats(0.05, 2.0), min_size=1, max_size=4))
        mean = sum(seeds) / len(seeds)
        rel[b] = mean
        sd = (
            0.0
            if len(seeds) < 2
            else math.sqrt(sum((x - mean) ** 2 for x in seeds) / (len(seeds) - 1))
        )
        spread[b] = {"std": sd, "min": min(seeds), "max": max(seeds), "n": len(seeds)}
    limit = draw(st.one_of(st.none(), st.floats(2.5, 9.0)))
    k = draw(st.sampled_from((0.0, 1.0, 2.0, 5.0)))
    return rel, spread, limit, k


@SETTINGS
@given(spread_case())
def test_spread_rule_matches_brute_force(case) -> None:  # type: ignore[no-untyped-def]
    rel, spread, limit, k = case
    profile = figure1_profile()
    want = brute_spread(profile, rel, spread, limit, k)
    if want is None:
        with pytest.raises(InfeasibleError):
            R.select_spread(profile, rel, spread, limit, k=k)
        return
    got = R.select_spread(profile, rel, spread, limit, k=k)
    assert (got.batch_size, got.freq_mhz) == want
    # the worst case never exceeds that of Algorithm 1's choice
    paper = select_ours(profile, rel, limit)

    def worst(c):  # type: ignore[no-untyped-def]
        return c.time_per_sample_s * max(rel[c.batch_size], spread[c.batch_size]["max"])

    assert worst(got) <= worst(paper) + 1e-15


def test_spread_rule_without_spread_is_algorithm1() -> None:
    profile = figure1_profile()
    rel = {8: 0.3, 16: 0.5, 32: 0.7, 64: 1.0}
    for lim in (None, 3.5, 5.0):
        a, b = R.select_spread(profile, rel, None, lim), select_ours(profile, rel, lim)
        assert (a.batch_size, a.freq_mhz) == (b.batch_size, b.freq_mhz)


def test_spread_rule_prefers_the_smaller_worst_case_within_the_noise() -> None:
    # b=16 is predicted 2% faster but one seed took 60% more; b=32 is steady
    profile = make_profile({(16, 900.0): (1.0, 5.0), (32, 900.0): (0.51, 5.0)})
    rel = {16: 0.5, 32: 1.0}
    spread = {16: {"std": 0.2, "min": 0.3, "max": 0.8, "n": 3},
              32: {"std": 0.01, "min": 0.99, "max": 1.01, "n": 3}}  # fmt: skip
    assert select_ours(profile, rel, None).batch_size == 16
    assert R.select_spread(profile, rel, spread, None, k=1.0).batch_size == 32
    # far outside the noise the paper's choice stands
    assert R.select_spread(profile, rel, spread, None, k=0.0).batch_size == 16


# --- the noise-scale rules ------------------------------------------------------------------
def test_r_model_limits_and_monotonicity() -> None:
    assert R.r_model(16, 128, None) == 1.0
    assert R.r_model(16, 128, 0.0) == 16 / 128
    assert R.r_model(128, 128, 37.0) == pytest.approx(1.0)
    assert R.r_model(16, 128, 10.0) < R.r_model(16, 128, 100.0) < R.r_model(16, 128, 1e4)


@pytest.mark.parametrize("b_true", [3.0, 40.0, 300.0, 5000.0])
def test_fit_noise_scale_recovers_the_model(b_true: float) -> None:
    rel = {b: R.r_model(b, 256, b_true) for b in (16, 32, 64, 128, 256)}
    assert R.fit_noise_scale(rel) == pytest.approx(b_true, rel=1e-3)


def test_disagreement_needs_both_intervals_apart() -> None:
    rel = {16: 0.5, 128: 1.0}
    spread = {16: {"std": 0.05, "min": 0.45, "max": 0.55, "n": 3}}
    # B = 64 -> r_gns(16) = (1 + 0.25) / (1 + 2) = 0.417, interval from B in [50, 80]
    lo, hi = R.r_model(16, 128, 50.0), R.r_model(16, 128, 80.0)
    assert lo < 0.45 < hi  # overlaps the proxy's range: agree
    assert R.disagreements(rel, spread, 50.0, 80.0) == {}
    # B in [10, 20]: r_gns(16) in [0.19, 0.24], below 0.45: disagree
    assert list(R.disagreements(rel, spread, 10.0, 20.0)) == [16]
    rel2, why = R.gns_target_relative(rel, spread, 15.0, 10.0, 20.0)
    assert rel2[16] == pytest.approx(R.r_model(16, 128, 15.0)) and "disagree" in why
    rel3, why = R.gns_target_relative(rel, spread, 64.0, 50.0, 80.0)
    assert rel3 == rel and "agree" in why
    assert R.gns_target_relative(rel, spread, None, None, None)[0] == rel


def test_transfer_rescales_by_the_noise_scale_ratio() -> None:
    b_proxy_true = 100.0
    rel = {b: R.r_model(b, 128, b_proxy_true) for b in (16, 32, 64, 128)}
    # the target's B is half the proxy's, both measured with tight intervals
    out, why = R.gns_transfer_relative(rel, (20.0, 18.0, 22.0), (40.0, 36.0, 44.0))
    for b in rel:
        assert out[b] == pytest.approx(R.r_model(b, 128, 50.0), rel=1e-3)
    assert "rescaled" in why
    # overlapping intervals: unchanged
    same, why = R.gns_transfer_relative(rel, (38.0, 30.0, 45.0), (40.0, 36.0, 44.0))
    assert same == rel and "agree" in why
    # unbounded upper ends overlap anything above their lower end
    assert R.gns_transfer_relative(rel, (500.0, 300.0, None), (40.0, 36.0, 44.0))[0] != rel
    assert R.gns_transfer_relative(rel, (50.0, 30.0, None), (40.0, 36.0, 44.0))[0] == rel
    assert R.gns_transfer_relative(rel, (None, None, None), (40.0, 36.0, 44.0))[0] == rel
