"""select/online.py: the online rule against brute force on small synthetic curves, and
the properties it must keep (weights sum to 1, an exact proxy gets the top weight, no
switch under the margin, never an infeasible b)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from undercap.errors import UndercapError
from undercap.select import online as O


def _curve(rate: float, n_points: int = 8, step: float = 100.0) -> list:
    """A saturating curve: accuracy 0.5 * (1 - exp(-rate * n))."""
    return [(step * (k + 1), 0.5 * (1 - math.exp(-rate * step * (k + 1)))) for k in range(n_points)]


def _proxy(
    name: str, rates: list, rel: dict, acc: float = 0.5, nmax: float = 800.0
) -> O.ProxyCurves:
    return O.ProxyCurves(name, rel, {b: [_curve(r) for r in rates] for b in rel}, acc, nmax)


def _brute_weights(proxies, b, prefix, acc, nref, w: O.Weighting) -> dict:
    """Straight from the formula: product of Gaussian densities, tempered, normalised."""
    like = {}
    for p in proxies:
        scale = p.samples_bmax / nref if w.x_scale == "bmax" else 1.0
        dens = 1.0
        for n, a in prefix:
            ys = []
            for c in p.curves[b]:
                x = n * scale
                pts = [(x0, y0, x1, y1) for (x0, y0), (x1, y1) in zip(c, c[1:]) if x0 <= x <= x1]
                y = (
                    c[0][1]
                    if x <= c[0][0]
                    else c[-1][1]
                    if not pts
                    else (
                        pts[0][1]
                        + (pts[0][3] - pts[0][1]) * (x - pts[0][0]) / (pts[0][2] - pts[0][0])
                    )
                )
                ys.append(y / p.target_accuracy)
            var = statistics.variance(ys) + w.sigma**2 if len(ys) > 1 else w.sigma**2
            mu = statistics.fmean(ys)
            dens *= math.exp(-((a / acc - mu) ** 2) / (2 * var)) / math.sqrt(2 * math.pi * var)
        like[p.name] = dens ** (1 / len(prefix)) if w.scheme == "tempered" else dens
    total = sum(like.values())
    return {k: v / total for k, v in like.items()}


REL = {16: 0.3, 32: 0.5, 64: 1.0}


def _proxies():
    return [
        _proxy("slow", [0.002, 0.0022, 0.0018], {16: 0.2, 32: 0.4, 64: 1.0}),
        _proxy("mid", [0.004, 0.0045, 0.0035], {16: 0.5, 32: 0.6, 64: 1.0}),
        _proxy("fast", [0.008, 0.009, 0.007], {16: 0.9, 32: 0.8, 64: 1.0}),
    ]


@pytest.mark.parametrize("scheme", ["likelihood", "tempered"])
@pytest.mark.parametrize("x_scale", ["samples", "bmax"])
def test_weights_match_brute_force(scheme: str, x_scale: str) -> None:
    proxies = _proxies()
    proxies[2] = O.ProxyCurves("fast", proxies[2].relative, proxies[2].curves, 0.5, 600.0)
    prefix = _curve(0.0041, n_points=4)
    w = O.Weighting(scheme, x_scale, 0.05)
    got = O.proxy_weights(proxies, 32, prefix, 0.5, 700.0, w).weights
    want = _brute_weights(proxies, 32, prefix, 0.5, 700.0, w)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert math.fsum(got.values()) == pytest.approx(1.0)


def test_exact_proxy_gets_top_weight_and_sum_is_one() -> None:
    rng = random.Random(0)
    for _ in range(50):
        rates = [rng.uniform(0.001, 0.01) for _ in range(4)]
        proxies = [_proxy(f"p{i}", [r * 0.95, r, r * 1.05], REL) for i, r in enumerate(rates)]
        i = rng.randrange(4)
        prefix = _curve(rates[i], n_points=rng.randint(1, 8))
        for scheme in ("likelihood", "tempered"):
            w = O.proxy_weights(proxies, 32, prefix, 0.5, 800.0, O.Weighting(scheme)).weights
            assert math.fsum(w.values()) == pytest.approx(1.0)
            assert max(w, key=w.get) == f"p{i}"


def test_no_evaluation_is_uniform_and_the_plain_median() -> None:
    proxies = _proxies() + [_proxy("x", [0.003] * 3, {16: 0.7, 32: 0.3, 64: 1.0})]
    for k in (3, 4):
        w = O.proxy_weights(proxies[:k], 32, [], 0.5, 800.0).weights
        assert set(w.values()) == {1.0 / k}
        pooled = O.pooled_relative(proxies[:k], w)
        for b in REL:
            assert pooled[b] == pytest.approx(statistics.median(p.relative[b] for p in proxies[:k]))


def _cost(vals: list, ws: list, x: float) -> float:
    return sum(w * abs(v - x) for v, w in zip(vals, ws))


def test_weighted_median_brute_force() -> None:
    """Against the definition: a value minimising sum w |v - m| (the lower and upper
    weighted medians bound the minimisers; with distinct integer weights no tie)."""
    rng = random.Random(1)
    for _ in range(200):
        vals = rng.sample(range(100), 5)
        ws = [rng.randint(1, 9) for _ in vals]
        if any(2 * sum(c) == sum(ws) for k in range(1, 5) for c in itertools.combinations(ws, k)):
            continue  # an exact half: the median is an interval; tested above for equal weights
        m = O.weighted_median(vals, ws)
        assert m in vals and _cost(vals, ws, m) == min(_cost(vals, ws, v) for v in vals)


def test_pooled_mean_and_common_batch_sizes() -> None:
    a = _proxy("a", [0.004] * 3, {16: 0.2, 32: 0.4, 64: 1.0})
    b = O.ProxyCurves("b", {32: 0.8, 64: 1.0}, a.curves, 0.5, 800.0)
    got = O.pooled_relative([a, b], {"a": 0.25, "b": 0.75}, how="mean")
    assert set(got) == {32, 64} and got[32] == pytest.approx(0.25 * 0.4 + 0.75 * 0.8)


FEAS = {16: (900.0, 1.0), 32: (800.0, 0.6), 64: (600.0, 0.45)}


def _brute_decide(feas, rel, cur, done, nmax, margin):
    p = done / (rel[cur] * nmax)
    left = {b: t * rel[b] * max(0.0, 1 - p) * nmax for b, (_f, t) in feas.items() if b in rel}
    best = min(left, key=lambda b: (left[b], -b))
    if abs(left[best] - (1 - margin) * left[cur]) < 1e-9 * (1 + left[cur]):
        return None  # at the margin exactly: float noise decides, not the rule
    return best if p < 1 and best != cur and left[best] < (1 - margin) * left[cur] else cur


def test_decide_brute_force_and_feasibility() -> None:
    rng = random.Random(2)
    for _ in range(300):
        feas = {b: (f, t) for b, (f, t) in FEAS.items() if rng.random() < 0.8} or {32: FEAS[32]}
        rel = {b: rng.choice([0.2, 0.3, 0.5, 0.7, 1.0]) for b in FEAS}
        cur = rng.choice(sorted(feas))
        done, margin = rng.choice([0.0, 100.0, 300.0, 900.0]), rng.choice([0.0, 0.05, 0.2])
        d = O.decide(feas, rel, cur, done, 1000.0, margin)
        want = _brute_decide(feas, rel, cur, done, 1000.0, margin)
        if want is None:
            continue
        assert d.batch_size == want
        assert d.batch_size in feas and d.freq_mhz == feas[d.batch_size][0]
        assert d.switch == (d.batch_size != cur)


def test_no_switch_within_margin() -> None:
    rel = {16: 0.5, 32: 0.78, 64: 1.0}  # t*r: 0.5, 0.468, 0.45: 64 best by 4% over 32
    assert not O.decide(FEAS, rel, 32, 100.0, 1000.0, 0.05).switch
    d = O.decide(FEAS, rel, 32, 100.0, 1000.0, 0.03)
    assert d.switch and d.batch_size == 64 and d.remaining_s < d.current_remaining_s


def test_no_switch_when_the_model_says_done_and_bad_inputs() -> None:
    rel = {16: 0.1, 32: 1.0, 64: 1.0}
    assert not O.decide(FEAS, rel, 32, 1000.0, 1000.0, 0.0).switch  # p = 1
    assert O.decide(FEAS, rel, 32, 999.0, 1000.0, 0.0).batch_size == 16
    with pytest.raises(UndercapError):
        O.decide({16: FEAS[16]}, rel, 32, 0.0, 1000.0, 0.0)  # running b infeasible
    with pytest.raises(UndercapError):
        O.Weighting("bayes")
