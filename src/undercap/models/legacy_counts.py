"""A training step's counts on torch without TorchDispatchMode (JetPack 4.6's torch 1.10).

workload.py counts FLOPs, kernels and DRAM traffic by seeing every aten op through a
TorchDispatchMode (torch >= 1.13). torch 1.10, the last for the Jetson Nano and TX2
(Python 3.6), has none, so there the counts are estimates from the model's leaf modules:

* FLOPs: the formulas of models/flops.py for each Conv*/Linear call, the backward at one
  forward's worth for each of grad-input and grad-weight that autograd computes (as
  flops.conv_backward_flops), and the char transformer's attention (flops.sdpa_*);
  attention inside a user's module is not counted.
* kernels: the model's autograd graph, one per node that is not a view (the forward's
  op) and one per gradient it passes on (the backward's); the loss's own are left out.
* traffic: the bytes of each leaf module's inputs, outputs and parameters, forward, and
  twice that for the backward.

Saved activations are measured the same way on both (saved_tensors_hooks, torch 1.10+).
"""

import math
from typing import Any, List, Sequence, Tuple

import torch
from torch import nn

from undercap._compat import prod
from undercap.models.flops import conv_flops, sdpa_backward_flops, sdpa_flops
from undercap.models.transformer import CausalSelfAttention

#: torch 2.x's multi-tensor Adam step, as workload.optimizer_kernels sees it: foreach ops
#: by number of tensor lists (AdamW: one more of depth 1, the decoupled decay), plus two
#: scalar reads per tensor (its step count) and the record_function pair
ADAM_FOREACH_DEPTHS = (1, 2, 1, 3, 1, 1, 1, 3)
#: autograd nodes of ops that alias (a view) and launch no kernel either way
_NO_KERNEL_NODES = ("View", "Reshape", "Alias", "Transpose", "Permute", "Expand", "Squeeze",
                    "Unsqueeze", "TBackward", "Select", "Slice", "AccumulateGrad", "Unbind",
                    "Split")  # fmt: skip


class LegacyCounter:
    """flop_counter()'s and workload._KernelCounter's figures from leaf-module hooks."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.flops = self.kernels = self.bytes = 0
        self._handles: List[Any] = []
        self._depth = 0

    def __enter__(self) -> "LegacyCounter":
        # it stands in for both of workload's counters: entered twice, hooked once
        self._depth += 1
        if self._depth == 1:
            leaves = [
                m
                for m in self.model.modules()
                if not list(m.children()) or isinstance(m, CausalSelfAttention)
            ]
            self._handles = [m.register_forward_hook(self._count) for m in leaves]
            self._handles.append(self.model.register_forward_hook(self._count_graph))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            for h in self._handles:
                h.remove()
            self._handles = []

    def get_total_flops(self) -> int:
        return self.flops

    def _count(self, module: nn.Module, inputs: Tuple[Any, ...], output: Any) -> None:
        x = inputs[0] if inputs else None
        own = list(module.parameters(recurse=False))
        # grad-input and grad-weight, where autograd computes them, each one forward's work
        grads = int(torch.is_tensor(x) and bool(x.requires_grad))
        grads += int(any(p.requires_grad for p in own))
        if isinstance(module, CausalSelfAttention):  # flops.py's formulas, as torch 2 counts
            qkv = (x.shape[0], module.n_heads, x.shape[1], module.head_dim)
            self.flops += sdpa_flops(qkv, qkv, qkv) + sdpa_backward_flops(None, qkv, qkv, qkv)
            return  # its Linear layers are leaves, counted on their own
        self.flops += _forward_flops(module, x, output) * (1 + grads)
        moved = _bytes(inputs) + _bytes(output) + sum(p.numel() * p.element_size() for p in own)
        self.bytes += moved * (1 + grads)

    def _count_graph(self, _model: nn.Module, _inputs: Any, output: Any) -> None:
        first = output[0] if isinstance(output, (tuple, list)) else output
        self.kernels += graph_kernels(first)


def _forward_flops(module: nn.Module, x: Any, out: Any) -> int:
    if not (torch.is_tensor(x) and torch.is_tensor(out)):
        return 0
    if isinstance(module, nn.modules.conv._ConvNd):
        flags = (None, None, None, bool(module.transposed))  # conv_flops reads args[3]
        return conv_flops(x, module.weight, None, *flags, out_shape=tuple(out.shape))
    if isinstance(module, nn.Linear):
        return 2 * prod(out.shape) * module.in_features
    return 0


def _bytes(tree: Any) -> int:
    if torch.is_tensor(tree):
        return tree.numel() * tree.element_size()
    if isinstance(tree, (list, tuple)):
        return sum(_bytes(t) for t in tree)
    return 0


def legacy_optimizer_kernels(n_tensors: int, optimizer: str, per_launch: Sequence[int]) -> int:
    """Kernel launches of a multi-tensor Adam/AdamW step over `n_tensors` parameters,
    `per_launch[d - 1]` tensors per launch for a foreach op over d lists."""
    depths = ADAM_FOREACH_DEPTHS + ((1,) if optimizer == "adamw" else ())
    return 2 + 2 * n_tensors + sum(math.ceil(n_tensors / per_launch[d - 1]) for d in depths)


def graph_kernels(output: Any) -> int:
    """Kernels of the forward and backward that made `output` (module docstring)."""
    seen, todo, kernels = set(), [getattr(output, "grad_fn", None)], 0
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nexts = [n for n, _ in node.next_functions if n is not None]
        if not any(k in type(node).__name__ for k in _NO_KERNEL_NODES):
            kernels += 1 + len(nexts)
        todo += nexts
    return kernels


def storage_of(t: torch.Tensor) -> Tuple[int, int]:
    """(data pointer, bytes) of the storage under a tensor (untyped_storage: torch 2.0+)."""
    if hasattr(t, "untyped_storage"):
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    s = t.storage()
    return s.data_ptr(), s.size() * s.element_size()
