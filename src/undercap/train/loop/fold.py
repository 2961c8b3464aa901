"""Batch norm folded into the layer before it, for held-out evaluation on a CPU.

In eval mode a BatchNorm is a fixed per-channel affine map of its input, so a
convolution (or linear layer) followed by one equals a single convolution with
scaled weights and a shifted bias (Ioffe and Szegedy 2015, Sec. 3.1; the fold is
what inference compilers such as TensorRT do). On a CPU the normalisation is a
separate pass over the whole activation, memory-bound: folding it away made the
small CNN's evaluation of 2,500 CIFAR images 1.15-1.18x faster at one thread (1.11 s
-> 0.96 s, channels-last, batches of 128, median of 15; a run of 7 read 1.01x:
benchmarks/eval_speed.py), with the same verdict on every image. The fold itself (a
trace and a copy) costs ~13 ms for that model: on 300 8x8 digits more than it saves.

The fold works on a copy (torch.fx traces the model's forward; its own
`fuse` pass folds only where the layer's output feeds the norm alone); a model fx
cannot trace (data-dependent control flow, most Hugging Face models) or one without
batch norm is evaluated as it is. Only sparse estimates on the CPU use it, on
held-out splits large enough to pay for it (estimate/runs.py); dense runs keep the
float sums they cached.
"""

import warnings
from typing import Optional

from torch import nn

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def folded(model: nn.Module) -> Optional[nn.Module]:
    """An eval-mode copy of `model` with each batch norm folded into the convolution
    or linear layer feeding it; None when there is nothing to fold or fx cannot trace
    the model (then evaluate the model itself)."""
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
    """The folded twin of a trainer's model at its current weights: built at the first
    evaluation after a step and reused by every evaluation until the next one (weights
    unchanged); a model that cannot be folded is asked once."""

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
