"""Count what one training sample costs: FLOPs, saved activations, DRAM traffic, kernels.

`workload_of(model, name, input_shape)` runs real training steps of a copy of the
model on the CPU (random inputs and labels) and measures:

* flops_per_sample: forward + backward FLOPs of convolutions, matmuls and attention,
  2 per multiply-accumulate (models/flops.py: torch's FlopCounterMode, corrected).
* activation_bytes_per_sample: bytes of the tensors autograd saves for the backward
  pass (torch.autograd.graph.saved_tensors_hooks), each storage counted once,
  parameters excluded. This is exactly what must stay resident until backward.
* traffic_bytes_per_sample: bytes read and written by every kernel of forward and
  backward (each non-view aten op's tensor arguments and results): the roofline
  assumption of no reuse through the cache, so an upper bound on DRAM traffic.
* precision: "fp16" and "bf16" count the step under torch.autocast (bf16 on the CPU:
  the same 2-byte tensors), casts included; FLOPs are the same.
* kernels_per_step: aten ops of forward + backward that launch a kernel (views and
  allocations excluded), plus the optimizer step's, counted the same way for
  torch.optim's multi-tensor (foreach) Adam/AdamW, each foreach op weighted by the CUDA
  launches multi_tensor_apply needs for that many tensors (_MTA_MAX_TENSORS).

Per-sample figures are the slope between two batch sizes (2 and 4), so costs paid once
per step (reading weights, writing weight gradients, BatchNorm statistics) do not leak
into per-sample terms (`Workload.optimizer_bytes_per_step` and `param_bytes` carry
those). Results are deterministic, so cached.
"""

import copy
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_flatten

from undercap._compat import nullcontext
from undercap.artifacts.workload import Workload
from undercap.errors import UndercapError
from undercap.models.flops import HAS_DISPATCH_MODE, TorchDispatchMode, flop_counter
from undercap.models.legacy_counts import LegacyCounter, legacy_optimizer_kernels, storage_of
from undercap.models.outputs import logits_of, loss_of
from undercap.models.registry import BUILTIN
from undercap.models.taskprobe import dummy_batch, forward, infer_task, resolve_task, token_vocab
from undercap.models.tasks import Task, name_it

_aten = torch.ops.aten
_BATCHES = (2, 4)
# multi_tensor_apply's tensors per launch, by number of tensor lists (depth 1..5):
# aten/src/ATen/native/cuda/MultiTensorApply.cuh
_MTA_MAX_TENSORS = (110, 64, 48, 36, 30)
# ops that allocate or alias without running a kernel
_NO_KERNEL = {
    "detach",
    "alias",
    "lift_fresh",
    "_unsafe_view",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "zeros_like_meta",
}
_cache: Dict[Tuple[Any, ...], Workload] = {}


def _tensor_bytes(tree: Any) -> int:
    leaves, _ = tree_flatten(tree)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


class _KernelCounter(TorchDispatchMode):
    """Counts kernel-launching aten ops and the bytes they read and write."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels = self.bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        if not (func.is_view or name in _NO_KERNEL):
            self.kernels += _launches(name, args)
            self.bytes += _tensor_bytes((args, kwargs)) + _tensor_bytes(out)
        return out


def _launches(name: str, args: Any) -> int:
    """Launches of one op: a foreach op's multi_tensor_apply takes its tensors in chunks."""
    if not name.startswith("_foreach"):
        return 1
    lists = [
        a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)
    ]
    if not lists:
        return 1
    per_launch = _MTA_MAX_TENSORS[min(len(lists), len(_MTA_MAX_TENSORS)) - 1]
    return math.ceil(len(lists[0]) / per_launch)


@dataclass(frozen=True)
class _StepCounts:
    flops: float
    saved_bytes: float
    traffic_bytes: float
    kernels: int


def _count_step(
    model: nn.Module, task: Task, x: torch.Tensor, y: torch.Tensor, precision: str = "fp32"
) -> _StepCounts:
    param_ptrs = {storage_of(p)[0] for p in model.parameters()}
    saved: Dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr, nbytes = storage_of(t)
        if ptr not in param_ptrs:
            saved[ptr] = nbytes
        return t

    model.zero_grad(set_to_none=True)
    # torch < 1.13 has no TorchDispatchMode: estimates from module hooks (legacy_counts.py)
    fc, kc = (
        (flop_counter(), _KernelCounter()) if HAS_DISPATCH_MODE else (LegacyCounter(model),) * 2
    )
    # mixed precision: bf16 on the CPU stands for fp16 too (module docstring)
    cast = nullcontext() if precision == "fp32" else torch.autocast("cpu", dtype=torch.bfloat16)
    with fc, kc:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), cast:
            out = forward(model, task, x, y)
        loss = loss_of(out)
        if loss is None:
            logits = logits_of(out)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
    return _StepCounts(fc.get_total_flops(), sum(saved.values()), kc.bytes, kc.kernels)


def optimizer_kernels(model: nn.Module, optimizer: str) -> int:
    """Kernel launches of one multi-tensor Adam/AdamW step on a CUDA device."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not HAS_DISPATCH_MODE:  # torch < 1.13: nothing sees the ops (legacy_counts.py)
        return legacy_optimizer_kernels(len(params), optimizer, _MTA_MAX_TENSORS)
    for p in params:
        p.grad = torch.zeros_like(p)
    cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    opt = cls(params, lr=1e-3, foreach=True)
    opt.step()  # the first step allocates state; count a steady-state one
    with _KernelCounter() as kc:
        opt.step()
    return kc.kernels


def workload_of(
    model: nn.Module,
    name: str,
    input_shape: Sequence[int],
    task: Optional[str] = None,
    precision: str = "fp32",
) -> Workload:
    """Measure a model's training cost per sample (module docstring) on a CPU copy of it.
    `task` (models/tasks.py) says what inputs to feed a user's model; built-ins know
    theirs, and a user's model without one is inferred (models/taskprobe.py). `name`
    labels the workload (any name: a model in a user's own loop has none in the
    registry, and is counted with Adam's optimizer step)."""
    input_shape = tuple(int(s) for s in input_shape)
    spec = BUILTIN.get(name)
    optimizer = spec.optimizer if spec else "adam"
    probe = copy.deepcopy(model).to("cpu").train()
    kind = resolve_task(probe, input_shape, task or (spec.task if spec else None))
    gen = torch.Generator().manual_seed(0)
    num_classes = _output_classes(probe, kind, input_shape, gen)
    vocab = token_vocab(probe) or num_classes
    n_params = sum(p.numel() for p in probe.parameters() if p.requires_grad)
    key = (name, input_shape, num_classes, n_params, kind.name, precision)
    if key in _cache:
        return _cache[key]
    try:
        # the counting steps run in training mode: dropout draws from torch's global
        # generator, which the run about to start has seeded (loop.Trainer). Fork it, or
        # the first run of a model in a process (the one that fills _cache) trains on
        # another dropout stream than the runs after it.
        with torch.random.fork_rng(devices=[]):
            batches = [dummy_batch(kind, input_shape, b, vocab, num_classes, gen) for b in _BATCHES]
            small, large = [_count_step(probe, kind, x, y, precision) for x, y in batches]
    except (RuntimeError, ValueError, TypeError) as e:  # e.g. labels per position, logits not
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UndercapError(
            f"a training step of the model on {kind.about} failed: "
            f"{type(e).__name__}: {msg}; {name_it(kind.name, _likely(probe, input_shape))}"
        ) from e
    db = _BATCHES[1] - _BATCHES[0]
    _cache[key] = Workload(
        model=name,
        input_shape=input_shape,
        flops_per_sample=(large.flops - small.flops) / db,
        activation_bytes_per_sample=(large.saved_bytes - small.saved_bytes) / db,
        traffic_bytes_per_sample=(large.traffic_bytes - small.traffic_bytes) / db,
        param_count=n_params,
        kernels_per_step=small.kernels + optimizer_kernels(probe, optimizer),
        precision=precision,
    )
    return _cache[key]


def _output_classes(
    model: nn.Module, task: Task, input_shape: Tuple[int, ...], gen: torch.Generator
) -> int:
    """Classes (vocabulary) of the model's output, from one forward pass on a dummy
    batch of `input_shape`; a model that cannot take that shape is one line naming
    both shapes and the task undercap took it for."""
    vocab = token_vocab(model) or 2
    x, y = dummy_batch(task, input_shape, 2, vocab, vocab, gen)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = forward(model, task, x, y)
    except Exception as e:
        raise UndercapError(_shape_mismatch(model, input_shape, task, e)) from e
    finally:
        model.train(was_training)
    try:
        return int(logits_of(out).shape[-1])
    except TypeError as e:
        raise UndercapError(f"the model returned {e}") from e


def output_classes(model: nn.Module, input_shape: Sequence[int], task: Optional[str]) -> int:
    """Classes of a model's output for per-sample inputs of `input_shape` (one forward
    pass on a dummy batch of the task's inputs: models/taskprobe.py)."""
    gen = torch.Generator().manual_seed(0)
    shape = tuple(int(s) for s in input_shape)
    return _output_classes(model, resolve_task(model, shape, task), shape, gen)


def _shape_mismatch(
    model: nn.Module, input_shape: Tuple[int, ...], task: Task, e: BaseException
) -> str:
    """One line: the input shape given, the one the model's first layer takes, and
    the task to name if undercap's was wrong."""
    given = "x".join(str(s) for s in input_shape)
    kind = "token ids" if task.token_inputs else "inputs"
    wants = _first_layer_wants(model)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return (
        f"the model does not take {kind} of --input-shape {given} (per sample {input_shape})"
        f"{'; ' + wants if wants else ''}: {type(e).__name__}: {msg}; "
        f"{name_it(task.name, _likely(model, input_shape))}"
    )


def _likely(model: nn.Module, input_shape: Sequence[int]) -> Optional[str]:
    """The task inference would pick, for the message (None if it fails too)."""
    try:
        return infer_task(model, input_shape)
    except Exception:
        return None


def _first_layer_wants(model: nn.Module) -> str:
    """What the model's first layer takes, when it says (Linear, Conv, Embedding)."""
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            return f"its first layer ({name}: Linear) takes {m.in_features} features per sample"
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            return f"its first layer ({name}: {type(m).__name__}) takes {m.in_channels} channels"
        if isinstance(m, nn.Embedding):
            return f"its first layer ({name}: Embedding) takes token ids below {m.num_embeddings}"
    return ""
