"""A small CNN for quick runs: trains to >90% on the 8x8 digits in seconds on a CPU.

Three 3x3 conv blocks (conv-BN-ReLU) with two 2x2 max-pools, global average pooling
and a linear head. Global pooling makes it work for any input size >= 4x4.
"""

from typing import Sequence

import torch
from torch import nn

from undercap.models.common import image_channels


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()
    )


class SmallCNN(nn.Module):
    #: parameter-name prefixes of the class-count dependent head (see models.weights)
    head_prefixes = ("head.",)

    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _block(in_channels, width),
            nn.MaxPool2d(2),
            _block(width, 2 * width),
            nn.MaxPool2d(2),
            _block(2 * width, 2 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build(num_classes: int, input_shape: Sequence[int]) -> SmallCNN:
    """The registry's factory: input_shape is (channels, height, width)."""
    return SmallCNN(in_channels=image_channels(input_shape, "small-cnn"), num_classes=num_classes)
