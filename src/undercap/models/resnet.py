"""ResNet-18, CIFAR variant (He et al. 2016, Sec. 4.2 adapts ResNets to 32x32 inputs).

Differences from the ImageNet ResNet-18: a 3x3 stride-1 stem convolution and no
max-pool, so a 32x32 image keeps full resolution in the first stage. Four stages of
two BasicBlocks (64, 128, 256, 512 channels; stride 1, 2, 2, 2) with 1x1 projection
shortcuts where the shape changes, global average pooling, linear head. With 10
classes this has 11,173,962 parameters and ~0.56 GMACs (1.11 GFLOPs) forward per
32x32 sample, the figures usually quoted for ResNet18-CIFAR.
"""

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from undercap.models.common import image_channels


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


def resnet18_stages() -> nn.Sequential:
    """The four stages of two BasicBlocks (64, 128, 256, 512 channels; stride 1, 2, 2,
    2) after a 64-channel stem: shared by the CIFAR and ImageNet variants."""
    stages, c_in = [], 64
    for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages.append(nn.Sequential(BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)))
        c_in = c_out
    return nn.Sequential(*stages)


class ResNet18(nn.Module):
    head_prefixes = ("head.",)

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU()
        )
        self.stages = resnet18_stages()
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.stages(self.stem(x))))


def build(num_classes: int, input_shape: Sequence[int]) -> ResNet18:
    """The registry's factory: input_shape is (channels, height, width)."""
    return ResNet18(in_channels=image_channels(input_shape, "resnet18"), num_classes=num_classes)
