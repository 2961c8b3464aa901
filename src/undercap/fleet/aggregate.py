"""Aggregating updates from unequal local work without bias: FedNova.

Wang, Liu, Liang, Joshi and Poor, "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization", NeurIPS 2020 (arXiv 2007.07481), Sec. 4.
With plain FedAvg, a node that takes tau_i local steps contributes an update about
tau_i times as large as one taking one step, so the fleet converges to the optimum
of sum_i p_i tau_i F_i instead of sum_i p_i F_i: biased toward the fast nodes. That
is exactly what balancing work across heterogeneous caps creates. FedNova divides
each node's update by its own normaliser a_i and rescales by the fleet's effective
step count:

    d_i = (x - x_i) / a_i                      the node's normalised update
    tau_eff = sum_i p_i a_i                    (p_i: node i's share of the data)
    x_new = x - tau_eff * sum_i p_i d_i

With plain local SGD a_i = tau_i (its steps); with heavy-ball momentum rho it is
a_i = (tau_i - rho (1 - rho^tau_i) / (1 - rho)) / (1 - rho) (ibid., Sec. 4, momentum
case). Adam and other adaptive local optimisers take steps of about one learning rate
each, so a_i = tau_i is used for them too (an approximation FedNova does not cover).

Arrays that no optimizer updates (BatchNorm running statistics, step counters) are
not updates: they are averaged by data share (FedAvg) and keep their dtype.
Numpy only: no torch, no Flower.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class NodeUpdate:
    """One node's reply: its arrays after the round, its local steps and data share."""

    arrays: Sequence[np.ndarray]
    local_steps: int
    weight: float  # the node's data share (num examples); normalised across nodes


def normaliser(local_steps: int, momentum: float = 0.0) -> float:
    """a_i (module docstring): the steps, or FedNova's momentum-weighted count."""
    if local_steps < 1:
        raise ValueError(f"local steps must be >= 1, got {local_steps}")
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if momentum == 0.0:
        return float(local_steps)
    rho = momentum
    return (local_steps - rho * (1.0 - rho**local_steps) / (1.0 - rho)) / (1.0 - rho)


def shares(updates: Sequence[NodeUpdate]) -> np.ndarray:
    w = np.array([float(u.weight) for u in updates], dtype=np.float64)
    if not len(w) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("node weights must be non-negative with a positive sum")
    return w / w.sum()


def fednova(
    global_arrays: Sequence[np.ndarray],
    updates: Sequence[NodeUpdate],
    *,
    trainable: Optional[Sequence[bool]] = None,
    momentum: float = 0.0,
) -> List[np.ndarray]:
    """x_new from the global arrays x and the nodes' arrays (module docstring).
    `trainable[k]` False: array k is a statistic, averaged by data share."""
    p = shares(updates)
    a = np.array([normaliser(u.local_steps, momentum) for u in updates])
    tau_eff = float(np.dot(p, a))
    trainable = [True] * len(global_arrays) if trainable is None else list(trainable)
    if len(trainable) != len(global_arrays):
        raise ValueError("one trainable flag per array")
    _check_shapes(global_arrays, updates)
    out = []
    for k, x in enumerate(global_arrays):
        xs = [np.asarray(u.arrays[k]) for u in updates]
        if trainable[k]:
            x64 = np.asarray(x, dtype=np.float64)
            d = sum(pi * (x64 - xi.astype(np.float64)) / ai for pi, xi, ai in zip(p, xs, a))
            out.append((x64 - tau_eff * d).astype(np.asarray(x).dtype))
        else:
            out.append(_average(xs, p, np.asarray(x).dtype))
    return out


def fedavg(global_arrays: Sequence[np.ndarray], updates: Sequence[NodeUpdate]) -> List[np.ndarray]:
    """Plain FedAvg (McMahan et al. 2017): the data-weighted mean of the nodes'
    arrays, for comparison (biased under unequal local steps)."""
    p = shares(updates)
    _check_shapes(global_arrays, updates)
    return [
        _average([np.asarray(u.arrays[k]) for u in updates], p, np.asarray(x).dtype)
        for k, x in enumerate(global_arrays)
    ]


def effective_steps(updates: Sequence[NodeUpdate], momentum: float = 0.0) -> float:
    """tau_eff = sum_i p_i a_i: the steps the aggregated update stands for."""
    p = shares(updates)
    return float(sum(pi * normaliser(u.local_steps, momentum) for pi, u in zip(p, updates)))


def _average(xs: Sequence[np.ndarray], p: np.ndarray, dtype: np.dtype) -> np.ndarray:
    mean = sum(pi * xi.astype(np.float64) for pi, xi in zip(p, xs))
    if np.issubdtype(dtype, np.integer):
        return np.rint(mean).astype(dtype)
    return np.asarray(mean).astype(dtype)


def _check_shapes(global_arrays: Sequence[np.ndarray], updates: Sequence[NodeUpdate]) -> None:
    for i, u in enumerate(updates):
        if len(u.arrays) != len(global_arrays):
            raise ValueError(f"node {i} sent {len(u.arrays)} arrays, expected {len(global_arrays)}")
        for k, (x, y) in enumerate(zip(global_arrays, u.arrays)):
            if np.shape(x) != np.shape(y):
                raise ValueError(f"node {i}, array {k}: shape {np.shape(y)} != {np.shape(x)}")
