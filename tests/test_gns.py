"""The gradient noise scale (estimate/gns.py): estimators against exact expectations,
and the probe against a brute-force noise scale over a whole (small) dataset."""

from __future__ import annotations

import math

import pytest

from undercap.errors import UndercapError
from undercap.estimate.gns import (
    NoiseScale,
    noise_scale_from_norms,
    probe_noise_scale,
    relative_from_noise_scale,
)


def test_estimators_recover_exact_expectations() -> None:
    # E|G_B|^2 = |G|^2 + tr(Sigma) / B (McCandlish et al. 2018, App. A)
    g2, trace, bs, bb = 0.7, 35.0, 16, 128
    small = [g2 + trace / bs] * 5
    big = [g2 + trace / bb] * 5
    ns = noise_scale_from_norms(small, big, bs, bb)
    assert ns.grad_sq == pytest.approx(g2)
    assert ns.trace_sigma == pytest.approx(trace)
    assert ns.b_simple == pytest.approx(trace / g2)
    assert ns.b_low == pytest.approx(trace / g2) and ns.b_high == pytest.approx(trace / g2)
    assert ns.samples == 5 * bb


def test_ratio_of_means_not_mean_of_ratios() -> None:
    bs, bb = 8, 64
    small = [1.0 + 40.0 / bs, 3.0 + 40.0 / bs]  # |G|^2 = 1 and 3, tr = 40 on both steps
    big = [1.0 + 40.0 / bb, 3.0 + 40.0 / bb]
    assert noise_scale_from_norms(small, big, bs, bb).b_simple == pytest.approx(40.0 / 2.0)


def test_noise_swamping_the_signal_gives_no_b() -> None:
    # |G_big|^2 far below |G_small|^2 / 4: the |G|^2 estimate is negative
    ns = noise_scale_from_norms([5.0, 5.0], [0.5, 0.5], 16, 64)
    assert ns.grad_sq < 0 and ns.b_simple is None and ns.relative([16, 64]) is None


def test_interval_brackets_the_estimate_and_round_trips() -> None:
    import random

    rng = random.Random(3)
    g2, trace, bs, bb = 1.0, 50.0, 16, 128
    small = [g2 + trace / bs + rng.gauss(0, 0.3) for _ in range(12)]
    big = [g2 + trace / bb + rng.gauss(0, 0.1) for _ in range(12)]
    ns = noise_scale_from_norms(small, big, bs, bb, seed=1)
    assert ns.b_low <= ns.b_simple <= ns.b_high
    assert NoiseScale.from_dict(ns.to_dict()) == ns


def test_bad_inputs() -> None:
    with pytest.raises(UndercapError):
        noise_scale_from_norms([1.0], [1.0, 2.0], 16, 64)
    with pytest.raises(UndercapError):
        noise_scale_from_norms([1.0], [1.0], 64, 16)
    with pytest.raises(UndercapError):
        relative_from_noise_scale(-1.0, [16])


def test_relative_from_noise_scale() -> None:
    r = relative_from_noise_scale(64.0, [16, 64, 128])
    assert r[128] == pytest.approx(1.0)
    assert r[16] == pytest.approx((1 + 16 / 64) / (1 + 128 / 64))
    assert relative_from_noise_scale(0.0, [16, 128])[16] == pytest.approx(16 / 128)


# --- the probe on a real model --------------------------------------------------------------
def _logistic_data(n: int = 4096, d: int = 6, seed: int = 0):  # type: ignore[no-untyped-def]
    import torch

    from undercap.data.base import Splits

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = ((x[:, 0] + 0.8 * torch.randn(n, generator=g)) > 0).long()
    return Splits("synthetic", "samples", x, y, x[:64], y[:64], num_classes=2)


def _brute_force_b(model, data) -> float:  # type: ignore[no-untyped-def]
    """tr(Sigma) / |G|^2 from every per-sample gradient of the dataset."""
    import torch

    params = list(model.parameters())
    per = []
    for i in range(data.n_train):
        loss = torch.nn.functional.cross_entropy(
            model(data.x_train[i : i + 1]), data.y_train[i : i + 1]
        )
        per.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).double())
    g = torch.stack(per)
    mean = g.mean(0)
    trace = float(((g - mean) ** 2).sum(1).mean())
    return trace / float(mean.pow(2).sum())


def test_probe_matches_the_brute_force_noise_scale() -> None:
    import torch

    torch.manual_seed(0)
    data = _logistic_data()
    model = torch.nn.Linear(6, 2)
    with torch.no_grad():
        model.weight.mul_(0.1)
    want = _brute_force_b(model, data)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    passes = []
    ns = probe_noise_scale(
        model, data, b_small=8, b_big=64, steps=60, seed=2, on_pass=passes.append
    )
    assert passes == [8] * (60 * 8)  # every forward-backward pass charged at B_small
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # unchanged
    assert ns.b_simple == pytest.approx(want, rel=0.25)
    assert ns.b_low < want < ns.b_high or math.isclose(ns.b_simple, want, rel_tol=0.1)


def test_probe_leaves_batch_norm_statistics_alone() -> None:
    import torch

    from undercap.data.base import Splits

    x = torch.randn(256, 1, 8, 8)
    y = torch.randint(0, 10, (256,))
    data = Splits("imgs", "image", x, y, x[:16], y[:16], num_classes=10)
    from undercap.models.small_cnn import SmallCNN

    model = SmallCNN(1, 10, width=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    probe_noise_scale(model, data, b_small=8, b_big=32, steps=2)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_probe_rejects_what_it_cannot_measure() -> None:
    import torch

    data = _logistic_data(n=100)
    model = torch.nn.Linear(6, 2)
    with pytest.raises(UndercapError, match="multiple"):
        probe_noise_scale(model, data, b_small=8, b_big=20, steps=2)
    with pytest.raises(UndercapError, match="at least 2"):
        probe_noise_scale(model, data, b_small=8, b_big=16, steps=1)
    with pytest.raises(UndercapError, match="training samples"):
        probe_noise_scale(model, data, b_small=8, b_big=64, steps=2)
