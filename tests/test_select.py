"""Selection: Algorithm 1, baselines and the safe frequency against brute forces."""

import json
import math
from typing import Dict, List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from select_helpers import figure1_profile, make_profile

from undercap.artifacts import Profile
from undercap.errors import ArtifactError, InfeasibleError, UndercapError
from undercap.select import (
    Choice,
    baseline1,
    baseline2,
    excluded_batch_sizes,
    expected_speedup,
    lowest_feasible_power_w,
    oracle,
    safe_freq_mhz,
    select_ours,
)

FREQ_GRID = (76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6, 614.4, 691.2, 768.0, 844.8, 921.6)
BATCH_GRID = tuple(2**k for k in range(10))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- brute forces, written independently of undercap.select --------------------------
def brute_ours(profile: Profile, rel: Dict[int, float], limit: Optional[float]):
    """Enumerate every (b, f); keep feasible ones that are the top feasible f of
    their b (Algorithm 1); minimum t*r, ties -> larger b. Returns (b, f) or None."""
    pairs = [(r.batch_size, r.freq_mhz, r.time_per_sample_s, r.peak_power_w) for r in profile.rows]
    feasible = [x for x in pairs if limit is None or x[3] <= limit]
    top = [
        x
        for x in feasible
        if x[0] in rel and not any(y[0] == x[0] and y[1] > x[1] for y in feasible)
    ]
    if not top:
        return None
    best_score = min(x[2] * rel[x[0]] for x in top)
    tied = [x for x in top if x[2] * rel[x[0]] == best_score]
    b = max(x[0] for x in tied)
    return b, max(x[1] for x in tied if x[0] == b)


def brute_global(profile: Profile, rel: Dict[int, float], limit: Optional[float]) -> float:
    """The best t*r over ALL feasible pairs (not only the top frequency)."""
    return min(
        r.time_per_sample_s * rel[r.batch_size]
        for r in profile.rows
        if r.batch_size in rel and (limit is None or r.peak_power_w <= limit)
    )


def brute_safe_full_grid(profiles: List[Profile], limit: float) -> Optional[float]:
    """For profiles with every (b, f) present: the highest f such that every row of
    every profile at a frequency <= f is within the limit."""
    freqs = sorted({r.freq_mhz for p in profiles for r in p.rows})
    ok = [
        f
        for f in freqs
        if all(r.peak_power_w <= limit for p in profiles for r in p.rows if r.freq_mhz <= f)
    ]
    return max(ok) if ok else None


# --- strategies ------------------------------------------------------------------------
@st.composite
def tables(draw, *, full=False, monotone=False, coarse=False, fs=None):
    bs = sorted(draw(st.sets(st.sampled_from(BATCH_GRID), min_size=1, max_size=6)))
    fs = fs or sorted(draw(st.sets(st.sampled_from(FREQ_GRID), min_size=1, max_size=6)))
    val = (
        st.sampled_from([1.0, 2.0, 3.0, 4.0])
        if coarse
        else st.floats(0.05, 20.0, allow_nan=False, allow_infinity=False)
    )
    table = {}
    for b in bs:
        base_t, base_p = draw(val), draw(val)
        for f in fs:
            if not full and not draw(st.booleans()) and (b, f) != (bs[-1], fs[0]):
                continue
            if monotone:  # faster and hungrier as f rises (DVFS)
                t = base_t * 1e-3 * fs[0] / f
                p = base_p + 0.01 * f * (1 + math.log2(b))
            else:
                t, p = draw(val) * 1e-3, draw(val)
            table[(b, f)] = (t, p)
    return make_profile(table)


@st.composite
def relatives(draw, profile: Profile, *, coarse: bool = False):
    bs = list(profile.batch_sizes)
    b_max = max(bs)
    extra = draw(st.sets(st.sampled_from(BATCH_GRID)))  # r for unprofiled b too
    chosen = draw(st.sets(st.sampled_from(bs))) | {b for b in extra if b < b_max}
    val = st.sampled_from([0.5, 1.0, 2.0]) if coarse else st.floats(0.05, 8.0)
    rel = {b: draw(val) for b in chosen}
    if draw(st.booleans()):
        rel[b_max] = 1.0  # r(b_max) = N(b_max)/N(b_max)
    return rel


limits = st.one_of(st.none(), st.floats(0.5, 25.0))


# --- properties ------------------------------------------------------------------------
@SETTINGS
@given(data=st.data(), coarse=st.booleans(), limit=limits)
def test_ours_matches_brute_force(data, coarse, limit):
    profile = data.draw(tables(coarse=coarse))
    rel = data.draw(relatives(profile, coarse=coarse))
    expected = brute_ours(profile, rel, limit)
    if expected is None:
        common = set(rel) & set(profile.batch_sizes)
        with pytest.raises(InfeasibleError if common else ArtifactError) as e:
            select_ours(profile, rel, limit)
        if common:  # the message names a limit that would make it feasible
            lowest = lowest_feasible_power_w(profile, common)
            assert f"{lowest:.2f} W" in str(e.value) and "raise the power limit" in str(e.value)
            assert brute_ours(profile, rel, lowest) is not None
        return
    c = select_ours(profile, rel, limit)
    assert (c.batch_size, c.freq_mhz) == expected
    assert c.method == "ours" and c.power_limit_w == limit
    assert limit is None or c.peak_power_w <= limit
    assert c.relative_samples == rel[c.batch_size]
    assert c.score == c.time_per_sample_s * rel[c.batch_size]
    assert oracle(profile, rel, limit) == Choice(**{**c.to_dict(), "method": "oracle"})
    assert set(excluded_batch_sizes(profile, rel, limit)).isdisjoint({c.batch_size})


@SETTINGS
@given(data=st.data(), limit=limits)
def test_monotone_tables_ours_is_globally_optimal_and_beats_baselines(data, limit):
    profile = data.draw(tables(full=True, monotone=True))
    rel = data.draw(relatives(profile))
    if brute_ours(profile, rel, limit) is None:
        return
    c = select_ours(profile, rel, limit)
    # With t falling in f, the top feasible f is the fastest: Algorithm 1 is optimal.
    assert c.score == brute_global(profile, rel, limit)
    try:
        f_safe = safe_freq_mhz([profile], limit)
    except InfeasibleError:
        return
    b2 = baseline2(profile, rel, limit, f_safe)
    assert c.score <= b2.score
    b1 = baseline1(profile, limit, f_safe, relative=rel)
    assert b1.batch_size == max(profile.batch_sizes) and b1.freq_mhz == f_safe
    if b1.score is not None:
        assert expected_speedup(c, b1) >= 1.0


@SETTINGS
@given(data=st.data(), n=st.integers(1, 3), limit=st.floats(0.5, 25.0))
def test_safe_frequency_matches_brute_force(data, n, limit):
    fs = sorted(data.draw(st.sets(st.sampled_from(FREQ_GRID), min_size=1, max_size=6)))
    profiles = [data.draw(tables(full=True, fs=fs)) for _ in range(n)]  # one device
    expected = brute_safe_full_grid(profiles, limit)
    if expected is None:
        with pytest.raises(InfeasibleError, match="raise the power limit"):
            safe_freq_mhz(profiles, limit)
        return
    f = safe_freq_mhz(profiles, limit)
    assert f == expected
    for p in profiles:  # no model exceeds the limit at f, at any batch size
        assert all(r.peak_power_w <= limit for r in p.rows if r.freq_mhz == f)


@SETTINGS
@given(data=st.data(), limit=limits, safe=st.sampled_from(FREQ_GRID))
def test_baselines_match_brute_force(data, limit, safe):
    profile = data.draw(tables())
    rel = data.draw(relatives(profile))
    b_max = max(profile.batch_sizes)
    at_or_below = [r for r in profile.rows if r.batch_size == b_max and r.freq_mhz <= safe]
    if not at_or_below:
        with pytest.raises(ArtifactError):
            baseline1(profile, limit, safe)
    else:
        row = max(at_or_below, key=lambda r: r.freq_mhz)
        if limit is not None and row.peak_power_w > limit:
            with pytest.raises(InfeasibleError, match="not safe"):
                baseline1(profile, limit, safe)
        else:
            c = baseline1(profile, limit, safe, relative=rel)
            assert (c.batch_size, c.freq_mhz) == (b_max, row.freq_mhz)
            assert c.relative_samples == rel.get(b_max)
    # baseline 2: each b at its highest f <= safe, within the limit, min t*r
    cands = {}
    for r in profile.rows:
        higher = r.batch_size not in cands or r.freq_mhz > cands[r.batch_size].freq_mhz
        if r.batch_size in rel and r.freq_mhz <= safe and higher:
            cands[r.batch_size] = r
    cands = {b: r for b, r in cands.items() if limit is None or r.peak_power_w <= limit}
    if not cands:
        with pytest.raises(InfeasibleError):
            baseline2(profile, rel, limit, safe)
        return
    score = {b: r.time_per_sample_s * rel[b] for b, r in cands.items()}
    best_b = max(b for b in score if score[b] == min(score.values()))
    c2 = baseline2(profile, rel, limit, safe)
    assert (c2.batch_size, c2.freq_mhz) == (best_b, cands[best_b].freq_mhz)


# --- hand-made cases ------------------------------------------------------------------
REL = {8: 0.5, 16: 0.6, 32: 0.8, 64: 1.0}


def test_figure1_example_smaller_batch_higher_clock_wins():
    p = figure1_profile()
    c = select_ours(p, REL, 5.5)
    # b=64 only reaches 400 MHz under 5.5 W; b=16 reaches 600 MHz and needs 0.6x samples.
    assert (c.batch_size, c.freq_mhz) == (16, 600.0)
    assert c.score == pytest.approx(3.0e-4)
    f_safe = safe_freq_mhz(p, 5.5)
    assert f_safe == 400.0
    b1 = baseline1(p, 5.5, f_safe, relative=REL)
    assert (b1.batch_size, b1.freq_mhz, b1.score) == (64, 400.0, pytest.approx(3.75e-4))
    assert expected_speedup(c, b1) == pytest.approx(1.25)
    b2 = baseline2(p, REL, 5.5, f_safe)
    assert (b2.batch_size, b2.freq_mhz) == (64, 400.0)
    # no cap: every batch size at 800 MHz, where b=64 wins (1.5 < 0.6 * 3)
    best = select_ours(p, REL, None)
    assert (best.batch_size, best.freq_mhz, best.power_limit_w) == (64, 800.0, None)


def test_batch_sizes_without_r_are_excluded_even_if_fastest():
    p = figure1_profile(unfit=(128,))
    rel = {32: 0.8, 64: 1.0, 256: 0.1}  # 8 and 16 never reached the target
    c = select_ours(p, rel, 5.5)
    assert c.batch_size == 64 and c.freq_mhz == 400.0  # 64: 3.75e-4 < 32: 4.0e-4
    why = excluded_batch_sizes(p, rel, 5.5)
    assert set(why) == {8, 16, 128, 256}
    assert "efficiency" in why[8] and "memory" in why[128] and "not in the profile" in why[256]
    # under 3.5 W, b=64 (3.6 W at 200 MHz) is out; b=32 (3.2 W at 200 MHz) remains
    why_low = excluded_batch_sizes(p, rel, 3.5)
    assert why_low[64] == "needs at least 3.60 W, above the 3.5 W limit"
    assert select_ours(p, rel, 3.5).batch_size == 32


def test_infeasible_message_names_lowest_feasible_power():
    p = figure1_profile()
    with pytest.raises(InfeasibleError) as e:
        select_ours(p, REL, 2.5)
    msg = str(e.value)
    lowest = 2.0 + 0.004 * 200 * (1 + 8 / 64)  # b=8 at 200 MHz
    assert lowest_feasible_power_w(p) == pytest.approx(lowest)
    assert f"lowest feasible power is {lowest:.2f} W" in msg and "raise the power limit" in msg
    assert "\n" not in msg
    # only batch sizes with r count: without 8, the lowest is b=16 at 200 MHz
    with pytest.raises(InfeasibleError, match=f"{2.0 + 0.8 * 1.25:.2f} W"):
        select_ours(p, {16: 0.6, 64: 1.0}, 2.5)


def test_ties_prefer_larger_batch_then_higher_freq():
    p = make_profile({(8, 100.0): (2.0, 1.0), (16, 100.0): (1.0, 1.0), (32, 100.0): (1.0, 5.0)})
    c = select_ours(p, {8: 0.5, 16: 1.0, 32: 1.0}, 2.0)  # 8 and 16 both score 1.0
    assert c.batch_size == 16


def test_bad_inputs_are_undercap_errors():
    p = figure1_profile()
    for bad in (float("nan"), float("inf"), -1.0, 0.0, True, "5"):
        with pytest.raises(UndercapError, match="power limit"):
            select_ours(p, REL, bad)  # type: ignore[arg-type]
    with pytest.raises(ArtifactError):
        select_ours(p, {8: float("nan"), 64: 1.0}, 5.0)
    dup = Profile(device={}, model="m", input_shape=(1,), rows=p.rows + p.rows[:1])
    with pytest.raises(ArtifactError, match="duplicate"):
        select_ours(dup, REL, 5.0)
    nan_row = make_profile({(8, 100.0): (float("nan"), 1.0)})
    with pytest.raises(ArtifactError, match="non-finite"):
        select_ours(nan_row, {8: 1.0}, 5.0)
    with pytest.raises(ArtifactError, match="no batch size has both"):
        select_ours(p, {512: 1.0}, 5.0)
    with pytest.raises(UndercapError, match="safe frequency"):
        baseline1(p, 5.0, float("nan"))


def test_baseline1_uses_highest_profiled_freq_at_or_below_safe():
    p = figure1_profile()
    c = baseline1(p, 10.0, 500.0)
    assert (c.batch_size, c.freq_mhz) == (64, 400.0)
    assert c.relative_samples is None and c.score is None
    with pytest.raises(ArtifactError, match="at or below"):
        baseline1(p, 10.0, 100.0)
    with pytest.raises(InfeasibleError, match="not safe"):
        baseline1(p, 5.0, 800.0)
    with pytest.raises(UndercapError, match="r\\(b\\)"):
        expected_speedup(select_ours(p, REL, 5.0), c)


def test_safe_frequency_over_several_models_and_efficient_sweeps():
    small = figure1_profile(model="small-cnn")  # b=64 within 5.5 W up to 400 MHz
    big = make_profile(
        {(b, f): (1e-3, 1.0 + 0.01 * f) for b in (8, 16) for f in (200.0, 400.0, 600.0)},
        model="resnet18",
    )  # within 5.5 W up to 400 MHz (5.0 W), 600 MHz draws 7 W
    assert safe_freq_mhz([big], 5.5) == 400.0
    assert safe_freq_mhz([small, big], 5.5) == 400.0
    assert safe_freq_mhz([small, big], 3.9) == 200.0
    assert safe_freq_mhz([small, big], None) == 800.0  # no cap: the top frequency
    assert safe_freq_mhz([small, big], 100.0) == 600.0  # big was never measured at 800
    with pytest.raises(InfeasibleError, match="small-cnn at batch size 64 draws 3.60 W"):
        safe_freq_mhz([small, big], 2.9)
    # An efficient sweep (Sec. 4.1) skips rows below where a smaller batch starts.
    eff = make_profile(
        {
            (64, 200.0): (1.0, 3.0),
            (64, 400.0): (1.0, 5.0),
            (64, 600.0): (1.0, 7.0),
            (32, 400.0): (1.0, 4.0),
            (32, 600.0): (1.0, 5.5),
            (32, 800.0): (1.0, 6.5),
        }
    )
    assert safe_freq_mhz(eff, 6.0) == 400.0  # b=64 exceeds at 600
    assert safe_freq_mhz(eff, 5.0) == 400.0
    assert safe_freq_mhz(eff, 4.5) == 200.0  # b=32 has no violation at/below 200
    other = make_profile({(8, 200.0): (1.0, 1.0)}, device="sim:jetson-tx2nx")
    with pytest.raises(UndercapError, match="different devices"):
        safe_freq_mhz([eff, other], 6.0)


def test_choice_round_trips_through_json():
    c = select_ours(figure1_profile(), REL, 5.5)
    assert Choice.from_dict(json.loads(json.dumps(c.to_dict()))) == c
