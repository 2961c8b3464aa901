"""FLOPs of a training step, on torch 2.1+ and on JetPack 5's torch 2.0.

`flop_counter()` is torch.utils.flop_counter.FlopCounterMode (torch >= 2.1) with the
corrections workload.py needs, or, where torch has no flop_counter (2.0), a
TorchDispatchMode with the same formulas for the ops that carry the FLOPs: matrix
products, convolutions (forward and backward) and attention. Both count 2 FLOPs per
multiply-accumulate, the convention torch's counter uses; elementwise ops, norms and
activations are not counted by either.
"""

from typing import Any, Callable, Dict, Sequence, Tuple

import torch

from undercap._compat import prod

try:
    from torch.utils._python_dispatch import TorchDispatchMode

    HAS_DISPATCH_MODE = True
except ImportError:  # torch < 1.13 (JetPack 4.6's 1.10): models/legacy_counts.py counts
    TorchDispatchMode = object  # type: ignore[assignment,misc]
    HAS_DISPATCH_MODE = False

_aten = torch.ops.aten


def _shape(t: Any) -> Tuple[int, ...]:
    return tuple(t.shape) if torch.is_tensor(t) else tuple(t)


def mm_flops(a: Any, b: Any, *_: Any, **__: Any) -> int:
    m, k = _shape(a)
    return 2 * m * k * _shape(b)[-1]


def addmm_flops(_bias: Any, a: Any, b: Any, *_: Any, **__: Any) -> int:
    return mm_flops(a, b)


def bmm_flops(a: Any, b: Any, *_: Any, **__: Any) -> int:
    bs, m, k = _shape(a)
    return 2 * bs * m * k * _shape(b)[-1]


def conv_flops(x: Any, w: Any, _bias: Any, *args: Any, out_shape: Any = None, **__: Any) -> int:
    """2 * (output elements) * (weight elements per output channel); a transposed
    convolution swaps the roles of input and output."""
    transposed = bool(args[3]) if len(args) > 3 else False
    return 2 * prod(_shape(x) if transposed else _shape(out_shape)) * prod(_shape(w)[1:])


def conv_backward_flops(
    grad_out: Any,
    x: Any,
    w: Any,
    _bias: Any,
    _stride: Any,
    _pad: Any,
    _dil: Any,
    transposed: bool,
    _out_pad: Any,
    _groups: int,
    output_mask: Sequence[bool],
    out_shape: Any = None,
) -> int:
    # torch's own formula ignores `groups` (it counts a depthwise conv's backward as a
    # dense one, ~40x too much for MobileNetV2). Each of grad-input and grad-weight
    # costs exactly the forward's multiply-adds.
    fwd = 2 * prod(_shape(x) if transposed else _shape(grad_out)) * prod(_shape(w)[1:])
    return fwd * (int(output_mask[0]) + int(output_mask[1]))


def sdpa_flops(q: Any, k: Any, v: Any, *_: Any, **__: Any) -> int:
    """Q K^T and P V: 2 * 2 * b * h * s_q * s_k * d (the full, not causal-halved, score
    matrix, as torch counts its flash/efficient kernels)."""
    b, h, s_q, d = _shape(q)
    s_k = _shape(k)[-2]
    d_v = _shape(v)[-1]
    return 2 * b * h * s_q * s_k * (d + d_v)


def sdpa_backward_flops(_g: Any, q: Any, k: Any, v: Any, *_: Any, **__: Any) -> int:
    """Backward of attention: the recomputed scores, dScores, dV, dQ and dK products
    (torch's sdpa_backward_flop_count): 2 * b * h * s_q * s_k * (3 d + 2 d_v)."""
    b, h, s_q, d = _shape(q)
    s_k = _shape(k)[-2]
    d_v = _shape(v)[-1]
    return 2 * b * h * s_q * s_k * (3 * d + 2 * d_v)


#: the corrections and additions FlopCounterMode gets (CPU attention has no formula), and
#: everything the torch 2.0 fallback counts; empty on torch < 1.13, whose ops have other
#: names and which counts through legacy_counts.py
CUSTOM: Dict[Any, Callable[..., int]] = {}
FALLBACK: Dict[Any, Callable[..., int]] = {}
if HAS_DISPATCH_MODE:
    CUSTOM[_aten.convolution_backward] = conv_backward_flops
    if hasattr(_aten, "_scaled_dot_product_flash_attention_for_cpu"):
        CUSTOM[_aten._scaled_dot_product_flash_attention_for_cpu] = sdpa_flops
        CUSTOM[_aten._scaled_dot_product_flash_attention_for_cpu_backward] = sdpa_backward_flops
    FALLBACK.update({_aten.mm: mm_flops, _aten.addmm: addmm_flops, _aten.bmm: bmm_flops})
    FALLBACK[_aten.convolution] = conv_flops
    FALLBACK.update(CUSTOM)
    for _name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention"):
        if hasattr(_aten, _name):
            FALLBACK[getattr(_aten, _name)] = sdpa_flops


class FallbackFlopCounter(TorchDispatchMode):
    """The FLOPs of the ops in FALLBACK, for torch without utils.flop_counter."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        formula = FALLBACK.get(func._overloadpacket)
        if formula is not None:
            first = out[0] if isinstance(out, (tuple, list)) else out
            out_shape = _shape(first) if torch.is_tensor(first) else None
            self.total += int(formula(*args, out_shape=out_shape))
        return out

    def get_total_flops(self) -> int:
        return self.total


def flop_counter(*, force_fallback: bool = False) -> Any:
    """A context manager with .get_total_flops(): torch's counter where it exists."""
    try:
        if force_fallback:
            raise ImportError
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:  # torch 2.0 (JetPack 5): no utils.flop_counter
        return FallbackFlopCounter()
    return FlopCounterMode(display=False, custom_mapping=CUSTOM)
