"""What one training sample costs a device: computed from the real torch model.

Pure data (no torch import) so that device models, artifacts and the CLI's fast
paths can use it. `undercap.models.workload_of(model, name, input_shape)` fills it in by
counting the real model's FLOPs and activation sizes.
"""

from dataclasses import asdict, dataclass
from typing import Any, Dict, Tuple

from undercap.artifacts.io import from_fields


@dataclass(frozen=True)
class Workload:
    """Per-sample and per-step costs of training one model on one input shape.

    flops_per_sample: forward + backward FLOPs for one sample (FlopCounterMode count).
    activation_bytes_per_sample: bytes of activations kept for the backward pass
        (fp32): the memory footprint that grows with batch size.
    traffic_bytes_per_sample: DRAM bytes moved per sample in forward + backward
        (activations and their gradients): the memory-bandwidth side of the roofline.
    param_count: trainable parameters; weights, gradients and Adam's two moments move
        once per step whatever the batch size, so their cost per sample falls as 1/b.
    kernels_per_step: approximate GPU kernel launches per training step, each a fixed
        launch latency.
    precision: the arithmetic the step was counted in: "fp32", or "fp16"/"bf16" mixed
        precision (torch.autocast: 16-bit activations, the casts' kernels and traffic;
        weights, their gradients and Adam's moments stay fp32).
    """

    model: str
    input_shape: Tuple[int, ...]
    flops_per_sample: float
    activation_bytes_per_sample: float
    traffic_bytes_per_sample: float
    param_count: int
    kernels_per_step: int
    precision: str = "fp32"

    @property
    def param_bytes(self) -> int:
        return 4 * self.param_count  # fp32

    @property
    def optimizer_bytes_per_step(self) -> float:
        # Adam step: read weight, grad, m, v; write weight, m, v (fp32) = 7 x params.
        return 7.0 * self.param_bytes

    def training_memory_bytes(self, batch_size: int) -> float:
        """Device memory needed to train at `batch_size`: weights, grads, Adam
        moments (4 x params) plus activations for the whole batch."""
        return 4.0 * self.param_bytes + batch_size * self.activation_bytes_per_sample

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape)
        if self.precision == "fp32":  # as fp32 workloads were always written
            del d["precision"]
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Workload":
        return from_fields(cls, d)
