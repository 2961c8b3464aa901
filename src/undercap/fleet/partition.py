"""Splitting the training data across the fleet's nodes: IID or non-IID.

* "iid": a seeded shuffle cut into near-equal parts.
* "dirichlet:ALPHA" (non-IID): each class's samples are split across the nodes in
  proportions drawn from Dirichlet(ALPHA) (Hsu, Qi and Brown 2019, arXiv 1909.06335,
  the usual label-skew benchmark); small ALPHA (0.1) gives nodes few classes, large
  ALPHA tends to IID. Every node keeps at least `min_per_node` samples.

Every node computes its own part from the same seed, so no index list is sent.
Numpy only.
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np

from undercap.errors import UndercapError


def parse_partition(text: str) -> Tuple[str, float]:
    """("iid", 0) or ("dirichlet", alpha) from "iid" / "dirichlet:0.5"."""
    kind, _, arg = str(text).partition(":")
    if kind == "iid" and not arg:
        return "iid", 0.0
    if kind == "dirichlet":
        try:
            alpha = float(arg or "0.5")
        except ValueError:
            alpha = -1.0
        if alpha > 0:
            return "dirichlet", alpha
    raise UndercapError(f"--partition {text!r}: use iid or dirichlet:ALPHA (ALPHA > 0, e.g. 0.5)")


def partition_indices(
    labels: np.ndarray, n_parts: int, partition: str, seed: int, min_per_node: int = 8
) -> List[np.ndarray]:
    """The training indices of every node (sorted), by `partition` (module docstring)."""
    kind, alpha = parse_partition(partition)
    labels = np.asarray(labels).reshape(-1)
    if n_parts < 1 or len(labels) < n_parts * min_per_node:
        raise UndercapError(
            f"{len(labels)} training samples cannot be split into {n_parts} nodes of at "
            f"least {min_per_node}; use fewer nodes or more data"
        )
    rng = np.random.default_rng(seed)
    if kind == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(len(labels)), n_parts)]
    return _dirichlet(labels, n_parts, alpha, rng, min_per_node)


def _dirichlet(
    labels: np.ndarray, n_parts: int, alpha: float, rng: np.random.Generator, min_n: int
) -> List[np.ndarray]:
    for _ in range(100):  # redraw until every node has enough (the usual recipe)
        parts: List[List[int]] = [[] for _ in range(n_parts)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet([alpha] * n_parts)) * len(idx)).astype(int)[:-1]
            for node, chunk in enumerate(np.split(idx, cuts)):
                parts[node].extend(int(i) for i in chunk)
        if min(len(p) for p in parts) >= min_n:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise UndercapError(
        f"dirichlet:{alpha:g} left a node with fewer than {min_n} samples in 100 draws; "
        "use a larger ALPHA or fewer nodes"
    )
