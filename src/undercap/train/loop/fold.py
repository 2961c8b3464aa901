"""Batch norm folded into the layer before it, for held-out evaluation on a CPU.

In eval mode a BatchNorm is a fixed per-channel affine map, so a convolution (or
linear layer) followed by one equals a single convolution with scaled weights and a
shifted bias (Ioffe and Szegedy 2015, Sec. 3.1; what inference compilers such as
TensorRT do). On a CPU that saves a memory-bound pass over the activation, with the
same verdicts; the fold itself costs more than it saves on small splits
(benchmarks/eval_speed.py). It works on a copy (torch.fx's `fuse`); a model fx cannot
trace (most Hugging Face models) or one without batch norm is evaluated as it is. Only
sparse estimates on the CPU use it, on splits large enough to pay (estimate/runs.py).
"""

import warnings
from typing import Optional

from torch import nn

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def folded(model: nn.Module) -> Optional[nn.Module]:
    """An eval-mode copy of `model` with each batch norm folded into the layer feeding
    it; None when there is nothing to fold or fx cannot trace the model."""
    if not any(isinstance(m, _NORMS) and m.track_running_stats for m in model.modules()):
        return None
    try:
        with warnings.catch_warnings():  # it imports torch.jit's deprecated scripting API
            warnings.simplefilter("ignore", DeprecationWarning)
            from torch.fx.experimental.optimization import fuse
    except ImportError:  # torch without fx (< 1.8)
        return None
    was_training = model.training
    model.eval()  # the fold reads the running statistics: eval mode only
    try:
        twin = fuse(model)
    except Exception:  # symbolic tracing fails on data-dependent Python control flow
        return None
    finally:
        model.train(was_training)
    return twin.eval()


class FoldCache:
    """The folded twin of a trainer's model at its current weights, built at the first
    evaluation after a step (a model that cannot be folded is asked once)."""

    def __init__(self) -> None:
        self._at: Optional[int] = None
        self._twin: Optional[nn.Module] = None
        self._foldable = True

    def model_at(self, model: nn.Module, version: int) -> nn.Module:
        """The model to evaluate at weight `version` (the trainer's step count)."""
        if not self._foldable:
            return model
        if self._at != version:
            self._twin, self._at = folded(model), version
            self._foldable = self._twin is not None
        return model if self._twin is None else self._twin

    def clear(self) -> None:
        """Forget the twin (weights were replaced: a checkpoint was loaded)."""
        self._at, self._twin = None, None


__all__ = ["FoldCache", "folded"]
