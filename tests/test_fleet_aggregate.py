"""FedNova aggregation (fleet/aggregate.py) against hand-computed cases, and its point:
unequal local work does not bias the fleet toward the nodes that work more."""

from __future__ import annotations

import numpy as np
import pytest

from undercap.fleet.aggregate import NodeUpdate, effective_steps, fedavg, fednova, normaliser


def test_fednova_by_hand() -> None:
    # x = 0; node 1: 4 steps to -2 (d1 = 2/4 = 0.5), node 2: 1 step to -1 (d2 = 1);
    # p = (0.5, 0.5): tau_eff = 2.5, x_new = 0 - 2.5 * (0.25 + 0.5) = -1.875.
    ups = [NodeUpdate([np.array([-2.0])], 4, 10), NodeUpdate([np.array([-1.0])], 1, 10)]
    assert fednova([np.array([0.0])], ups)[0] == pytest.approx([-1.875])
    assert fedavg([np.array([0.0])], ups)[0] == pytest.approx([-1.5])  # biased to node 1
    assert effective_steps(ups) == pytest.approx(2.5)


def test_fednova_weights_by_data_share() -> None:
    # p = (0.75, 0.25), steps (2, 1): d = (1/2 * 4, 1 * 4)... x = 1, x_i = (-3, -3)
    # d1 = 4/2 = 2, d2 = 4/1 = 4; tau_eff = 0.75*2 + 0.25*1 = 1.75;
    # x_new = 1 - 1.75 * (0.75*2 + 0.25*4) = 1 - 1.75 * 2.5 = -3.375
    ups = [NodeUpdate([np.array(-3.0)], 2, 300), NodeUpdate([np.array(-3.0)], 1, 100)]
    out = fednova([np.array(1.0)], ups)[0]
    assert out.shape == () and float(out) == pytest.approx(-3.375)


def test_equal_steps_is_fedavg() -> None:
    rng = np.random.default_rng(0)
    x = [rng.normal(size=(3, 2)), rng.normal(size=4)]
    ups = [NodeUpdate([a + rng.normal(size=a.shape) for a in x], 5, w) for w in (1, 2, 3)]
    for got, want in zip(fednova(x, ups), fedavg(x, ups)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_momentum_normaliser_by_hand() -> None:
    # rho = 0.5, tau = 2: (2 - 0.5 * (1 - 0.25) / 0.5) / 0.5 = (2 - 0.75) / 0.5 = 2.5
    assert normaliser(2, 0.5) == pytest.approx(2.5)
    assert normaliser(7) == 7.0
    # one step with momentum is one step of size 1 (nothing accumulated yet)
    assert normaliser(1, 0.9) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        normaliser(0)


def test_statistics_are_averaged_and_keep_their_dtype() -> None:
    x = [np.array([0.0]), np.array(10, dtype=np.int64)]
    ups = [
        NodeUpdate([np.array([-4.0]), np.array(14, dtype=np.int64)], 4, 1),
        NodeUpdate([np.array([-1.0]), np.array(11, dtype=np.int64)], 1, 1),
    ]
    w, count = fednova(x, ups, trainable=[True, False])
    assert w == pytest.approx([-2.5])  # d = (1, 1), tau_eff = 2.5
    assert count.dtype == np.int64 and int(count) == 12  # rint(12.5) is 12 (to even)


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        fednova([np.zeros(2)], [NodeUpdate([np.zeros(3)], 1, 1)])


def _local_gd(x: float, c: float, steps: int, lr: float) -> float:
    for _ in range(steps):  # f_i(x) = (x - c_i)^2 / 2, gradient x - c_i
        x -= lr * (x - c)
    return x


@pytest.mark.parametrize("aggregate", ["fednova", "fedavg"])
def test_unequal_work_bias(aggregate: str) -> None:
    """Two nodes with equal data, optima 0 and 10; node 1 takes 10 local steps a round,
    node 2 one (a balanced fleet with a fast and a slow node). The fleet objective's
    optimum is 5. FedNova lands there; FedAvg is pulled toward the fast node's 0
    (Wang et al. 2020, Theorem 1: it optimises sum p_i tau_i F_i instead)."""
    x, steps, optima, lr = 3.0, (10, 1), (0.0, 10.0), 0.001
    for _ in range(3000):
        ups = [
            NodeUpdate([np.array(_local_gd(x, c, k, lr))], k, 1.0) for c, k in zip(optima, steps)
        ]
        agg = fednova if aggregate == "fednova" else fedavg
        x = float(agg([np.array(x)], ups)[0])
    if aggregate == "fednova":
        assert x == pytest.approx(5.0, abs=0.05)
    else:  # sum p tau c / sum p tau = (10*0 + 1*10) / 11 = 0.91, about
        assert x < 1.5
