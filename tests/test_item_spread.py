"""A sequential look on items of many predictions (text windows): the spread of the
items scored so far (objective.ItemSpread) and the Student t margin it gives
(evalplan.margin), against the Bhatia-Davis bound that holds for any item."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from conftest import run_files

from undercap._compat import normal_inv_cdf
from undercap.data.spec import DataSpec
from undercap.estimate import EstimateConfig, estimate
from undercap.train.loop.evalplan import SPREAD_MIN_ITEMS, Check, check_z, margin, t_quantile
from undercap.train.loop.scoring import ItemSpread, make_objective, score_until, top1_items


def test_t_quantile_matches_the_density() -> None:
    """Reference quantiles from numerical integration of the Student t density (the
    tails a look's Bonferroni z use: 4 and 17 checks at 2.7e-3)."""
    assert t_quantile(normal_inv_cdf(1 - 6.75e-4), 66) == pytest.approx(3.3475, abs=1e-4)
    assert t_quantile(normal_inv_cdf(1 - 1.6e-4), 33) == pytest.approx(4.0177, abs=1e-4)
    assert t_quantile(1.959964, 30) == pytest.approx(2.0423, abs=1e-4)  # any table
    assert t_quantile(3.0, 10**9) == pytest.approx(3.0)  # the normal, in the limit


def test_item_spread_is_the_ratio_estimators_residual_spread() -> None:
    """Per item c correct of k predictions: the sd of c - R k over mean k (Cochran's
    ratio estimator), added in batches as a look scores them."""
    gen = torch.Generator().manual_seed(0)
    k = torch.randint(20, 33, (90,), generator=gen).double()
    c = torch.floor(k * torch.rand(90, generator=gen, dtype=torch.float64))
    spread = ItemSpread()
    for i in range(0, 90, 32):
        spread.add(c[i : i + 32], k[i : i + 32])
    r = c.sum() / k.sum()
    want = float(((c - r * k) ** 2).sum() / 89) ** 0.5 / float(k.mean())
    assert spread.m == 90 and spread.sd() == pytest.approx(want, rel=1e-9)
    one = ItemSpread()  # class labels: one prediction per item, no spread read
    one.add(torch.tensor([1.0, 0.0, 1.0]), torch.ones(3, dtype=torch.float64))
    assert one.sd() is None


def test_top1_items_sums_to_top1() -> None:
    """Per-item counts add up to the metric's (ignored positions not scored)."""
    logits = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(1))
    y = logits.argmax(-1)
    y[0, :3] = (y[0, :3] + 1) % 5  # three wrong
    y[1, 4:] = -100  # two not scored
    c, k = top1_items(logits, y)
    assert c.tolist() == [3.0, 4.0, 6.0, 6.0] and k.tolist() == [6.0, 4.0, 6.0, 6.0]
    c1, k1 = top1_items(logits[:, 0], y[:, 0])
    assert c1.tolist() == [0.0, 1.0, 1.0, 1.0] and k1.tolist() == [1.0] * 4


def test_margin_takes_the_t_margin_only_where_it_is_tighter() -> None:
    z = check_z(300, 67, 2.7e-3)
    bound = margin(0.36, 67, 300, z)
    assert margin(0.36, 67, 300, z, None) == bound
    tight = margin(0.36, 67, 300, z, 0.1)
    fpc = (300 - 67) / 299
    assert tight == pytest.approx(t_quantile(z, 66) * 0.1 * math.sqrt(fpc / 67))
    assert tight < bound / 4
    assert margin(0.36, 67, 300, z, 0.9) == bound  # wider than any [0, 1] item: the bound
    few = SPREAD_MIN_ITEMS - 1
    assert margin(0.36, few, 300, z, 0.1) == margin(0.36, few, 300, z)


def test_a_text_look_reads_the_spread_an_image_look_does_not() -> None:
    """score_until passes the spread of sequence items to the look's check, None for
    class labels; a check that reads it stops a look the bound cannot."""
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Embedding(8, 8), torch.nn.Linear(8, 8))
    x = torch.randint(0, 8, (200, 32))
    seen = []
    score_until(seq, x, x, batch_size=50, stop=lambda mean, m, sd: seen.append(sd) or False)
    assert len(seen) == 3 and all(s is not None and 0.0 < s < 0.3 for s in seen)
    flat = torch.nn.Linear(4, 3)
    seen.clear()
    xs, ys = torch.randn(200, 4), torch.randint(0, 3, (200,))
    score_until(flat, xs, ys, batch_size=50, stop=lambda mean, m, sd: seen.append(sd) or False)
    assert seen == [None, None, None]
    assert make_objective(metric=None).items is not None


def _population(mean: float, n: int, rng: random.Random) -> list[float]:
    """n windows of 32 characters whose accuracy averages `mean` over the split,
    with a between-window spread (easy and hard windows) as text has."""
    ps = [min(max(rng.gauss(mean, 0.08), 0.0), 1.0) for _ in range(n)]
    return [sum(rng.random() < p for _ in range(32)) / 32 for p in ps]


def test_the_t_look_rules_out_a_split_at_the_target_rarely() -> None:
    """Looks in random orders at splits whose whole mean reaches the threshold: the
    share ruled out stays near the look's error (2.7e-3), while at 0.03 below the
    threshold most looks stop early (the bound would stop none)."""
    rng = random.Random(7)
    n, every = 300, 67
    z = check_z(n, every, 2.7e-3)

    def stops(items: list[float], threshold: float) -> int:
        check, spread = Check(threshold, n, every, z), ItemSpread()
        for m in range(every, n, every):
            batch = torch.tensor(items[m - every : m], dtype=torch.float64) * 32
            spread.add(batch, torch.full_like(batch, 32.0))
            if check(sum(items[:m]) / m, m, spread.sd()):
                return m
        return n

    wrong = 0
    for _ in range(40):
        pop = _population(0.36, n, rng)
        at = sum(pop) / n  # the threshold is the split's own mean: the hardest case
        for _ in range(50):
            rng.shuffle(pop)
            wrong += stops(pop, at) < n
    assert wrong <= 15  # 2,000 looks: 5.4 expected at 2.7e-3
    below = [_population(0.33, n, rng) for _ in range(40)]
    early = [stops(p, sum(p) / n + 0.03) for p in below]
    assert sum(m < n for m in early) >= 30


BIGRAM = """
from torch import nn


class Bigram(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, 32), nn.Linear(32, vocab)

    def forward(self, x):
        return self.head(self.emb(x))


def build(num_classes, input_shape):
    return Bigram(num_classes)
"""


def _markov_text(path: Path, chars: int = 48_016) -> None:
    """12 letters, each followed by its own successor 60% of the time: a bigram model
    tops out near 0.63, in steps as it learns one successor after another."""
    rng, letters = random.Random(0), "abcdefghijkl"
    after = {c: letters[(i * 5 + 3) % 12] for i, c in enumerate(letters)}
    out = ["a"]
    for _ in range(chars - 1):
        out.append(after[out[-1]] if rng.random() < 0.6 else rng.choice(letters))
    path.write_text("".join(out))


def test_a_text_estimate_looks_less_with_the_spread_and_reports_dense_n(tmp_path: Path) -> None:
    """A real estimate on text windows (300 held-out windows of 16 characters): the
    spread's looks rule points out that the bound's cannot (fewer whole evaluations,
    fewer windows scored), and both report dense's N(b)."""
    (tmp_path / "bigram.py").write_text(BIGRAM)
    _markov_text(tmp_path / "c.txt")
    cfg = EstimateConfig(
        model=f"{tmp_path / 'bigram.py'}:build",
        data=DataSpec(f"text:{tmp_path / 'c.txt'}", context=16),
        batch_sizes=(8, 16),
        seeds=(0,),
        target_accuracy=0.5,
        max_samples=6000,
        eval_every_samples=64,
        eval_schedule="dense",
    )
    real = EstimateConfig.sparse_params

    def run(name: str, schedule: str, item_spread: bool = True) -> dict[str, Any]:
        def params(self: Any, device: str) -> Any:
            return dataclasses.replace(real(self, device), item_spread=item_spread)

        with mock.patch.object(EstimateConfig, "sparse_params", params):
            eff = estimate(dataclasses.replace(cfg, eval_schedule=schedule),
                           cache_dir=tmp_path / name, torch_device="cpu", progress=False,
                           threads=1)  # fmt: skip
        recs = [json.loads(p.read_text()) for p in run_files(tmp_path / name).values()]
        return {"n": eff.samples_to_target, "eval": [r["eval"] for r in recs]}

    dense, spread, bound = run("d", "dense"), run("s", "sparse"), run("b", "sparse", False)
    assert spread["n"] == dense["n"] == bound["n"] and all(n for (n,) in dense["n"].values())
    assert all(e["item_spread"] for e in spread["eval"])
    assert not any(e["item_spread"] for e in bound["eval"])

    def scored(evals: list[dict[str, Any]]) -> tuple[int, int]:
        whole = sum(e["full_evals"] for e in evals)
        return whole, whole * 300 + sum(e["screened_items"] for e in evals)

    spread_whole, spread_items = scored(spread["eval"])
    bound_whole, bound_items = scored(bound["eval"])
    assert spread_whole < bound_whole and spread_items < bound_items
