"""On-device cross-check of r(b): the gradient noise scale (beyond the paper).

McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training"
(arXiv 1812.06162, 2018). With G the true gradient and Sigma the per-sample gradient
covariance, a mini-batch gradient G_B has E|G_B|^2 = |G|^2 + tr(Sigma) / B, so two
batch sizes B_small < B_big give unbiased estimates (their App. A, Eqs. A.1-A.2)

    |G|^2     = (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(Sigma) = (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

and the "simple" noise scale B_simple = tr(Sigma) / |G|^2 (their Eq. 2.8), with
numerator and denominator each averaged over the probe steps before dividing, as
they do (a ratio of noisy means, not a mean of noisy ratios). Their model of
training predicts the samples to a given loss as E(b) = E_min (1 + b / B_noise)
(their Eq. 2.11), so the ratio this project uses is

    r_gns(b) = (1 + b / B) / (1 + b_max / B).

The probe (`probe_noise_scale`) runs on the TARGET data from the starting weights:
`steps` probe steps, each drawing B_big = k x B_small samples as k sub-batches of
B_small (one forward-backward pass each, accumulated); the k sub-batch gradients
give |G_small|^2 (their mean squared norm) and their mean is G_big, as
data-parallel workers give per-worker and all-reduced gradients (their App. A.1).
The weights are not updated, so every step measures the same point. Its spread is
a percentile bootstrap over the probe steps. The probe's forward-backward passes
are real device work: the caller charges each one to the device (`on_pass`), so a
simulated device's virtual clock and energy include it.

The pure parts (`noise_scale_from_norms`, `relative_from_noise_scale`) import no
torch; `probe_noise_scale` imports it when called.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

from undercap import defaults
from undercap.errors import UndercapError

#: the bootstrap's interval: the 16th and 84th percentiles (+-1 sigma for a normal)
_LOW_Q, _HIGH_Q = 0.16, 0.84


@dataclass(frozen=True)
class NoiseScale:
    """B_simple from a probe at two batch sizes, with its bootstrap interval.

    b_simple is None when the |G|^2 estimate is not positive: the gradient noise
    swamped the signal at these batch sizes (B_noise beyond what the probe resolves).
    """

    b_small: int
    b_big: int
    steps: int
    grad_sq: float  # |G|^2, mean over probe steps
    trace_sigma: float  # tr(Sigma), mean over probe steps
    b_simple: Optional[float]
    b_low: Optional[float]  # bootstrap 16th percentile (None: unbounded)
    b_high: Optional[float]  # bootstrap 84th percentile (None: unbounded)
    small_sq: tuple[float, ...]  # per step: mean |G_small|^2 over its sub-batches
    big_sq: tuple[float, ...]  # per step: |G_big|^2

    @property
    def samples(self) -> int:
        return self.steps * self.b_big

    def relative(self, batch_sizes: Sequence[int]) -> Optional[dict[int, float]]:
        """r_gns(b) for `batch_sizes` (1 at the largest), or None without a B."""
        if self.b_simple is None:
            return None
        return relative_from_noise_scale(self.b_simple, batch_sizes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(small_sq=list(self.small_sq), big_sq=list(self.big_sq), samples=self.samples)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NoiseScale:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["small_sq"] = tuple(float(x) for x in known.get("small_sq", ()))
        known["big_sq"] = tuple(float(x) for x in known.get("big_sq", ()))
        return cls(**known)


def _estimates(
    small_sq: Sequence[float], big_sq: Sequence[float], b_small: int, b_big: int
) -> tuple[float, float]:
    """(|G|^2, tr(Sigma)) from the means of the per-step squared norms (App. A)."""
    s = math.fsum(small_sq) / len(small_sq)
    g = math.fsum(big_sq) / len(big_sq)
    grad_sq = (b_big * g - b_small * s) / (b_big - b_small)
    trace = (s - g) / (1.0 / b_small - 1.0 / b_big)
    return grad_sq, trace


def _ratio(grad_sq: float, trace: float) -> float:
    """B_simple; +inf when the |G|^2 estimate is not positive (noise dominates)."""
    return trace / grad_sq if grad_sq > 0 else math.inf


def _quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolation quantile of an ascending list (inf-safe at the ends)."""
    pos = q * (len(sorted_xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi or sorted_xs[lo] == sorted_xs[hi]:
        return sorted_xs[lo]
    if math.isinf(sorted_xs[hi]):
        return math.inf
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def noise_scale_from_norms(
    small_sq: Sequence[float],
    big_sq: Sequence[float],
    b_small: int,
    b_big: int,
    *,
    resamples: int = defaults.GNS_BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> NoiseScale:
    """B_simple and its bootstrap interval from per-step squared gradient norms at
    two batch sizes (pure; `probe_noise_scale` measures the norms)."""
    if len(small_sq) != len(big_sq) or not small_sq:
        raise UndercapError("noise scale: need one |G_small|^2 and one |G_big|^2 per probe step")
    if not 0 < b_small < b_big:
        raise UndercapError(f"noise scale: need 0 < B_small < B_big, got {b_small}, {b_big}")
    grad_sq, trace = _estimates(small_sq, big_sq, b_small, b_big)
    b = _ratio(grad_sq, trace)
    rng = random.Random(seed)
    n = len(small_sq)
    boot = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        g2, tr = _estimates([small_sq[i] for i in idx], [big_sq[i] for i in idx], b_small, b_big)
        boot.append(_ratio(g2, tr))
    boot.sort()
    lo, hi = (_quantile(boot, q) for q in (_LOW_Q, _HIGH_Q)) if boot else (b, b)
    return NoiseScale(
        b_small=int(b_small),
        b_big=int(b_big),
        steps=n,
        grad_sq=grad_sq,
        trace_sigma=trace,
        b_simple=None if math.isinf(b) else max(b, 0.0),
        b_low=None if math.isinf(lo) else max(lo, 0.0),
        b_high=None if math.isinf(hi) else max(hi, 0.0),
        small_sq=tuple(float(x) for x in small_sq),
        big_sq=tuple(float(x) for x in big_sq),
    )


def relative_from_noise_scale(b_noise: float, batch_sizes: Sequence[int]) -> dict[int, float]:
    """r(b) = E(b) / E(b_max) = (1 + b / B) / (1 + b_max / B) (McCandlish et al.,
    Eq. 2.11); B = 0 means every sample counts alike (r = b / b_max)."""
    if not batch_sizes:
        raise UndercapError("noise scale: no batch sizes")
    if not (math.isfinite(b_noise) and b_noise >= 0):
        raise UndercapError(f"noise scale must be a finite B >= 0, got {b_noise}")
    b_max = max(batch_sizes)
    if b_noise == 0:
        return {int(b): b / b_max for b in batch_sizes}
    return {int(b): (1 + b / b_noise) / (1 + b_max / b_noise) for b in batch_sizes}


def _squared_norm(tensors: Sequence[Any]) -> float:
    """sum |t|^2 over the tensors, in float64 (small differences of large norms)."""
    return float(sum(float(t.double().pow(2).sum()) for t in tensors if t is not None))


def probe_noise_scale(
    model: Any,
    data: Any,
    *,
    b_small: int,
    b_big: int,
    steps: int,
    seed: int = 0,
    loss: Optional[str] = None,
    metric: Optional[str] = None,
    torch_device: str = "cpu",
    on_pass: Optional[Callable[[int], None]] = None,
) -> NoiseScale:
    """Measure B_simple of `model` (the starting weights) on `data` (a data.Splits:
    its training split): `steps` probe steps of B_big samples drawn without
    replacement, each as B_big / B_small sub-batches. The model is left unchanged
    (a copy is probed: batch norm would update its running statistics).
    `on_pass(b_small)` is called after each forward-backward pass (device time)."""
    import copy

    import torch

    from undercap.train.objective import make_objective

    if b_small < 1 or b_big <= b_small or b_big % b_small:
        raise UndercapError(f"noise scale: B_big {b_big} must be a multiple of B_small {b_small}")
    if steps < 2:
        raise UndercapError("noise scale: need at least 2 probe steps for a spread")
    k, need = b_big // b_small, steps * b_big
    if need > data.n_train:
        raise UndercapError(
            f"noise scale: {steps} probe steps of {b_big} samples need {need} training "
            f"samples, the data has {data.n_train}; probe fewer steps"
        )
    objective = make_objective(loss, metric)
    order = torch.randperm(data.n_train, generator=torch.Generator().manual_seed(seed))[:need]
    probe = copy.deepcopy(model).to(torch_device)
    probe.train()  # the gradient training sees: dropout on, batch statistics
    params = [p for p in probe.parameters() if p.requires_grad]
    small_sq, big_sq = [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for s in range(steps):
            total = [torch.zeros_like(p) for p in params]
            sq = 0.0
            for j in range(k):
                idx = order[(s * k + j) * b_small : (s * k + j + 1) * b_small]
                x, y = data.x_train[idx].to(torch_device), data.y_train[idx].to(torch_device)
                grads = torch.autograd.grad(objective.loss(probe(x), y), params, allow_unused=True)
                sq += _squared_norm(grads)
                for acc, g in zip(total, grads):
                    if g is not None:
                        acc.add_(g)
                if on_pass is not None:
                    on_pass(b_small)
            small_sq.append(sq / k)
            big_sq.append(_squared_norm([t / k for t in total]))
    return noise_scale_from_norms(small_sq, big_sq, b_small, b_big, seed=seed)
