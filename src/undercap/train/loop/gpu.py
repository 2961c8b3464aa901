"""What the loop does differently on a GPU, so that an estimate there runs at the GPU's
speed and reports the GPU's times (the CPU path is untouched: its runs stay bit for bit
what they were, which the replays of benchmarks/ depend on).

* Time: the host clock measures a kernel's launch, so CUDA events around each step and
  evaluation give the GPU's own times, read once an evaluation has waited for the GPU.
* The batch order lives on the GPU: a CPU index into GPU data is copied first, waiting
  for every kernel queued before it, once per step.
* Channels-last images and cuDNN's autotuner (`cudnn.benchmark`) where the run is not
  deterministic: the layout Tensor Cores read, the fastest algorithm per shape.
"""

import contextlib
import time
from typing import Any, Iterator, List, Tuple

import torch

from undercap.models.outputs import logits_of
from undercap.train.loop.precision import device_type


def on_gpu(torch_device: Any) -> bool:
    return device_type(torch_device) == "cuda"


class HostClock:
    """Host seconds, added to the trainer's field as each span ends (the CPU's clock)."""

    @contextlib.contextmanager
    def span(self, owner: Any, field: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(owner, field, getattr(owner, field) + time.perf_counter() - t0)

    def settle(self, owner: Any) -> None:
        """Nothing is pending on the host's clock."""


class GpuClock(HostClock):
    """CUDA events around each span; their times are added when `settle` is called,
    after something has waited for the GPU (an evaluation's one read of its sums)."""

    def __init__(self) -> None:
        self.pending: List[Tuple[Any, Any, str]] = []

    @contextlib.contextmanager
    def span(self, owner: Any, field: str) -> Iterator[None]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        try:
            yield
        finally:
            end.record()
            self.pending.append((start, end, field))

    def settle(self, owner: Any) -> None:
        if not self.pending:
            return
        self.pending[-1][1].synchronize()
        for start, end, field in self.pending:
            setattr(owner, field, getattr(owner, field) + start.elapsed_time(end) / 1000.0)
        self.pending = []


def clock_for(torch_device: Any) -> HostClock:
    return GpuClock() if on_gpu(torch_device) else HostClock()


def fast_layout(model: Any, x_sample: torch.Tensor, torch_device: Any, deterministic: bool) -> bool:
    """Channels-last and cuDNN's autotuner for a non-deterministic image run on a GPU
    (module docstring); True where batches should be made channels-last."""
    if not on_gpu(torch_device) or deterministic:
        return False
    torch.backends.cudnn.benchmark = True
    if x_sample.dim() != 4 or not x_sample.is_floating_point():
        return False
    model.to(memory_format=torch.channels_last)
    return True


def order_on(perm: torch.Tensor, data: Any) -> torch.Tensor:
    """A batch order on the device the data lives on (no copy per step)."""
    return perm.to(data.x_train.device)


def whole_sums_on_device(
    model: Any, x: torch.Tensor, y: torch.Tensor, loss_fn: Any, batch_size: int, device: Any
) -> Tuple[float, int, float, int]:
    """A whole evaluation with the default top-1 metric on a GPU (on_gpu), its sums kept
    on the device and read once: (correct, scored, loss sum, items)."""
    right = kept = torch.zeros((), dtype=torch.int64, device=device)
    loss = torch.zeros((), dtype=torch.float64, device=device)
    for i in range(0, x.shape[0], batch_size):
        xb, yb = x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)
        out = model(xb)
        keep = yb != -100
        right = right + ((logits_of(out).argmax(dim=-1) == yb) & keep).sum()
        kept = kept + keep.sum()
        loss = loss + loss_fn(out, yb).double() * yb.shape[0]
    c, k, total = torch.stack([right.double(), kept.double(), loss]).tolist()
    return c, int(k), total, int(x.shape[0])
