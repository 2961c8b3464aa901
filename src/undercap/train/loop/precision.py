"""The arithmetic a run trains in: fp32, or mixed precision with 16-bit floats.

Mixed precision is torch.autocast: each op in the precision it is safe and fast in,
weights and optimizer state in fp32 (Micikevicius et al., "Mixed Precision Training",
ICLR 2018). fp16's narrow range needs the loss scaled so small gradients do not flush
to zero: a GradScaler, whose state is in every checkpoint so that a resumed run scales
as the uninterrupted one did. bf16 has fp32's range and needs none.

On a simulated board the host trains in the precision asked for and the board's clock
charges its rate; a CPU without 16-bit float arithmetic (x86 without AVX512-FP16) runs
fp16 many times slower than fp32, so there fp16 trains in bf16, the same 2-byte width,
and every output says so.
"""

from typing import Any, List, Optional, Tuple

import torch

from undercap._compat import nullcontext
from undercap.errors import UndercapError

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_torch_device(name: str) -> str:
    """'auto' -> 'cuda' when torch has a usable GPU, else 'cpu'; 'cuda' must exist."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UndercapError(
            f"--torch-device {name}: torch sees no CUDA GPU; use --torch-device cpu or auto"
        )
    if name != "cpu" and not name.startswith("cuda"):
        raise UndercapError(f"--torch-device {name!r}: use auto, cpu or cuda[:N]")
    return name


def device_type(torch_device: Any) -> str:
    return "cuda" if str(torch_device).startswith("cuda") else "cpu"


def host_precision(precision: str, torch_device: Any, simulated: bool) -> str:
    """The precision the host's training runs in for a run in `precision` (module
    docstring): fp16 on a CPU trains in bf16 for a simulated board, else as asked."""
    if precision == "fp16" and simulated and device_type(torch_device) == "cpu":
        return "bf16"
    return precision


def check_precision(device: Any, precision: str) -> None:
    """One line, before any work, for a precision the device has no hardware for."""
    if precision not in device.precisions():
        have = device.precisions()
        raise UndercapError(
            f"{device.name} has no {precision} (it runs {', '.join(have)}); use "
            f"--precision {have[-1]}, or auto"
        )


def on_device(device: Any, precision: str, torch_device: Any) -> Tuple[str, List[str]]:
    """A run on `device` in `precision`, checked before any work: the precision the
    host trains in, and the note every output carries where that is a stand-in."""
    check_precision(device, precision)
    host = host_precision(precision, torch_device, device.is_simulated)
    check_runnable(host, torch_device)
    if host == precision:
        return host, []
    return host, [
        f"trained in {host} on the host as a stand-in for {precision} (this CPU runs "
        f"{precision} far slower); {device.name}'s clock charged {precision}'s rate"
    ]


def check_runnable(precision: str, torch_device: Any) -> None:
    """One line, before any work, where this torch cannot train in `precision` here."""
    if precision == "fp32":
        return
    if precision not in DTYPES:
        raise UndercapError(f"unknown precision {precision!r}; use fp32, fp16, bf16 or auto")
    kind = device_type(torch_device)
    if kind == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        name = torch.cuda.get_device_name(torch.device(torch_device))
        raise UndercapError(
            f"--precision bf16: {name} has no bf16 (Ampere and later); use fp16 or fp32"
        )
    try:
        with torch.autocast(kind, dtype=DTYPES[precision]):
            pass
    except (RuntimeError, ValueError) as e:
        raise UndercapError(
            f"--precision {precision}: torch {torch.__version__} cannot autocast to "
            f"{precision} on the {kind} ({e}); use fp32"
        ) from e


def autocast(precision: str, torch_device: Any) -> Any:
    """The context a forward pass runs in: autocast to the 16-bit float, or nothing."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type(torch_device), dtype=DTYPES[precision])


def backward_step(loss: torch.Tensor, optimizer: Any, scaler: Optional[Any]) -> None:
    """The backward pass and the optimizer's step; with fp16's scaler (grad_scaler) the
    loss is scaled up and a step whose gradients overflowed is skipped."""
    if scaler is None:
        loss.backward()
        optimizer.step()
        return
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def grad_scaler(precision: str, torch_device: Any) -> Optional[Any]:
    """fp16's loss scaler (None for fp32 and bf16)."""
    if precision != "fp16":
        return None
    kind = device_type(torch_device)
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):  # torch >= 2.3: any device
        return amp.GradScaler(kind)
    if kind == "cuda":
        return torch.cuda.amp.GradScaler()
    raise UndercapError(
        f"--precision fp16 on the CPU needs torch 2.3 or later (a CPU GradScaler); "
        f"torch {torch.__version__} has none: use bf16 or fp32"
    )
