"""The several-proxy rules (select/ensemble.py) against brute forces written from the
rule's text, and the property the rule exists for: one bad proxy cannot spoil it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from select_helpers import make_profile

from undercap.errors import ArtifactError, InfeasibleError, UndercapError
from undercap.select import ensemble as E
from undercap.select import select_ours

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import matrix_cells as MC  # noqa: E402 - the matrix's controls live with the matrix

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BS, FS = (8, 16, 32, 64), (100.0, 200.0, 400.0)


# --- brute forces ----------------------------------------------------------------------------
def _top(profile, bs, limit):  # type: ignore[no-untyped-def]
    """b -> its highest feasible row, over every row of the profile."""
    top = {}
    feasible = [r for r in profile.rows if limit is None or r.peak_power_w <= limit]
    for r in feasible:
        if r.batch_size in bs and (
            r.batch_size not in top or r.freq_mhz > top[r.batch_size].freq_mhz
        ):
            top[r.batch_size] = r
    return top


def _median(xs):  # type: ignore[no-untyped-def]
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def brute_median(profile, proxies, limit):  # type: ignore[no-untyped-def]
    common = set.intersection(*(set(r) for r in proxies.values()))
    top = _top(profile, common, limit)
    if not top:
        return None
    med = {b: _median([r[b] for r in proxies.values()]) for b in top}
    b = min(top, key=lambda b: (top[b].time_per_sample_s * med[b], -b))
    return b, top[b].freq_mhz


def brute_regrets(profile, proxies, limit):  # type: ignore[no-untyped-def]
    common = set.intersection(*(set(r) for r in proxies.values()))
    top = _top(profile, common, limit)
    out = {}
    for n, r in proxies.items() if top else ():
        best = min(top[b].time_per_sample_s * r[b] for b in top)
        out[n] = {b: top[b].time_per_sample_s * r[b] / best - 1 for b in top}
    return top, out


def brute_minimax(profile, proxies, limit):  # type: ignore[no-untyped-def]
    top, reg = brute_regrets(profile, proxies, limit)
    if not top:
        return None
    worst = {b: max(reg[n][b] for n in reg) for b in top}
    floor = min(worst.values())
    tied = [b for b in top if worst[b] <= floor + 1e-12]
    b = min(tied, key=lambda b: (sum(reg[n][b] for n in reg) / len(reg), -b))
    return b, top[b].freq_mhz


# --- strategies --------------------------------------------------------------------------------
@st.composite
def cases(draw, min_proxies=1):  # type: ignore[no-untyped-def]
    val = st.sampled_from([1.0, 2.0, 3.0, 4.0])  # coarse: ties happen
    table = {}
    for b in BS:
        for i, f in enumerate(FS):  # DVFS: faster and hungrier as f rises
            table[(b, f)] = (draw(val) * 1e-3 / (i + 1), 1.0 + i + b / 32 + draw(val) / 10)
    n = draw(st.integers(min_proxies, 5))
    proxies = {}
    for k in range(n):
        bs = draw(st.sets(st.sampled_from(BS), min_size=1)) | {64}
        proxies[f"p{k}"] = {b: draw(st.sampled_from([0.25, 0.5, 0.75, 1.0])) for b in bs}
    limit = draw(st.one_of(st.none(), st.sampled_from([2.0, 2.5, 3.0, 4.0, 6.0])))
    return make_profile(table), proxies, limit


# --- the rule and the controls against their brute forces ---------------------------------------
@SETTINGS
@given(cases())
def test_median_rule_matches_brute_force(case) -> None:  # type: ignore[no-untyped-def]
    profile, proxies, limit = case
    want = brute_median(profile, proxies, limit)
    if want is None:
        with pytest.raises(InfeasibleError):
            E.select_ensemble(profile, proxies, limit)
        return
    got = E.select_ensemble(profile, proxies, limit)
    assert (got.choice.batch_size, got.choice.freq_mhz) == want
    assert got.choice.method == E.ENSEMBLE
    top, reg = brute_regrets(profile, proxies, limit)
    for view in got.proxies:  # what the summary shows: each proxy's pick and regret
        assert view.regret == pytest.approx(reg[view.name][want[0]], abs=1e-12)
        own = select_ours(profile, proxies[view.name], limit)
        assert (view.preferred.batch_size, view.preferred.freq_mhz) == (
            own.batch_size,
            own.freq_mhz,
        )
    assert got.worst_regret == pytest.approx(max(reg[n][want[0]] for n in reg), abs=1e-12)


@SETTINGS
@given(cases())
def test_minimax_control_matches_brute_force(case) -> None:  # type: ignore[no-untyped-def]
    profile, proxies, limit = case
    want = brute_minimax(profile, proxies, limit)
    if want is None:
        with pytest.raises(InfeasibleError):
            MC.select_minimax(profile, proxies, limit)
        return
    got = MC.select_minimax(profile, proxies, limit)
    assert (got.choice.batch_size, got.choice.freq_mhz) == want
    # nothing has a smaller worst regret, and so no rule's choice does either
    assert got.worst_regret <= E.select_ensemble(profile, proxies, limit).worst_regret + 1e-12


@SETTINGS
@given(cases(), st.sampled_from([1e-3, 1e3]), st.data())
def test_one_bad_proxy_cannot_spoil_it(case, wild, data) -> None:  # type: ignore[no-untyped-def]
    """Two proxies that agree decide, however extreme a third one is (the median)."""
    profile, proxies, limit = case
    good = next(iter(proxies.values()))
    bad = {b: data.draw(st.sampled_from([wild, 1.0])) for b in good}
    trio = {"a": good, "b": dict(good), "outlier": bad}
    try:
        want = select_ours(profile, good, limit)
    except InfeasibleError:
        return
    got = E.select_ensemble(profile, trio, limit).choice
    assert (got.batch_size, got.freq_mhz) == (want.batch_size, want.freq_mhz)


@SETTINGS
@given(cases())
def test_one_proxy_is_algorithm_1_and_order_does_not_matter(case) -> None:  # type: ignore[no-untyped-def]
    profile, proxies, limit = case
    try:
        got = E.select_ensemble(profile, proxies, limit)
    except InfeasibleError:
        return
    name, rel = next(iter(proxies.items()))
    single = E.select_ensemble(profile, {name: rel}, limit)
    want = select_ours(profile, rel, limit)
    assert (single.choice.batch_size, single.choice.freq_mhz) == (want.batch_size, want.freq_mhz)
    assert single.worst_regret == pytest.approx(0.0, abs=1e-12)
    flipped = E.select_ensemble(profile, dict(reversed(list(proxies.items()))), limit)
    assert (flipped.choice.batch_size, flipped.choice.freq_mhz) == (
        got.choice.batch_size,
        got.choice.freq_mhz,
    )


def test_errors_name_the_problem() -> None:
    profile = make_profile({(8, 100.0): (1e-3, 2.0), (16, 100.0): (1e-3, 3.0)})
    with pytest.raises(UndercapError):
        E.select_ensemble(profile, {}, None)
    with pytest.raises(ArtifactError, match="on every proxy"):
        E.select_ensemble(profile, {"a": {8: 1.0}, "b": {16: 1.0}}, None)
    with pytest.raises(InfeasibleError, match="lowest feasible power is 2.00 W"):
        E.select_ensemble(profile, {"a": {8: 0.5, 16: 1.0}, "b": {8: 1.0, 16: 1.0}}, 1.0)
    with pytest.raises(ArtifactError, match="proxy b"):
        E.select_ensemble(profile, {"a": {8: 1.0}, "b": {8: -1.0}}, None)


def test_to_dict_lists_each_proxy() -> None:
    profile = make_profile({(8, 100.0): (1e-3, 2.0), (16, 100.0): (0.6e-3, 3.0)})
    ens = E.select_ensemble(profile, {"a": {8: 0.5, 16: 1.0}, "b": {8: 0.9, 16: 1.0}}, None)
    d = ens.to_dict()
    assert d["rule"] == "ensemble" and [p["name"] for p in d["proxies"]] == ["a", "b"]
    assert d["relative"] == {"8": 0.7, "16": 1.0}  # the median of two is their mean
    # b=16: t*r 0.6e-3 vs b=8: 0.7e-3 under the median; proxy a prefers b=8 (0.5e-3)
    assert (d["batch_size"], d["proxies"][0]["preferred"]["batch_size"]) == (16, 8)
    assert d["proxies"][0]["regret"] == pytest.approx(0.6 / 0.5 - 1)
