"""The models undercap trains, a registry by name, and their measured workloads.

Names (paper Sec. 5): "resnet18" and "mobilenetv2" (CIFAR variants, 32x32 inputs),
"char-transformer" (6 layers, 6 heads, 256 dims, context 64), plus "small-cnn" for
quick runs on the bundled 8x8 digits.

Optimizers and base learning rates (the LR at the largest batch; smaller batches
use sqrt scaling, loop.scaled_lr): the CNNs use Adam at 1e-3 (Kingma & Ba's default,
paper Sec. 5 uses Adam for the CNNs); the transformer uses AdamW at 6e-4 (the GPT-3
small / nanoGPT default; nanoGPT's shakespeare-char config uses 1e-3 but with a
warm-up, which our loop does not have).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from undercap.errors import UndercapError
from undercap.models.mobilenet import MobileNetV2
from undercap.models.resnet import ResNet18
from undercap.models.small_cnn import SmallCNN
from undercap.models.transformer import CharTransformer
from undercap.models.weights import load_weights, save_weights
from undercap.models.workload import workload_of

MODEL_NAMES = ("small-cnn", "resnet18", "mobilenetv2", "char-transformer")

_DEFAULT_SHAPES: dict[str, tuple[int, ...]] = {
    "small-cnn": (1, 8, 8),  # the bundled digits
    "resnet18": (3, 32, 32),
    "mobilenetv2": (3, 32, 32),
    "char-transformer": (64,),  # context length (paper Sec. 5)
}

__all__ = [
    "MODEL_NAMES",
    "build_model",
    "default_input_shape",
    "default_lr",
    "load_weights",
    "optimizer_for",
    "save_weights",
    "workload_of",
]


def _check(name: str) -> str:
    if name not in MODEL_NAMES:
        raise UndercapError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
    return name


def build_model(name: str, *, num_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """A freshly initialised model. Images: input_shape (C, H, W); the
    char-transformer: input_shape (context,) and num_classes = vocabulary size."""
    _check(name)
    shape = tuple(int(s) for s in input_shape)
    if name == "char-transformer":
        if len(shape) != 1:
            raise UndercapError(f"char-transformer needs input_shape (context,), got {shape}")
        return CharTransformer(vocab_size=num_classes, context=shape[0])
    if len(shape) != 3:
        raise UndercapError(f"{name} needs input_shape (channels, height, width), got {shape}")
    cls = {"small-cnn": SmallCNN, "resnet18": ResNet18, "mobilenetv2": MobileNetV2}[name]
    return cls(in_channels=shape[0], num_classes=num_classes)


def default_input_shape(name: str) -> tuple[int, ...]:
    return _DEFAULT_SHAPES[_check(name)]


def optimizer_for(name: str) -> str:
    """ "adamw" for the transformer, "adam" for the CNNs (paper Sec. 5)."""
    return "adamw" if name == "char-transformer" else "adam"


def default_lr(name: str) -> float:
    """Base learning rate at the largest batch size (see module docstring)."""
    return 6e-4 if _check(name) == "char-transformer" else 1e-3
