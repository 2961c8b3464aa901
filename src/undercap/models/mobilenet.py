"""MobileNetV2, CIFAR variant (Sandler et al. 2018, adapted to 32x32 inputs).

Inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 linear projection; ReLU6)
with the paper's table of stages (t, c, n, s). For 32x32 inputs the stem convolution
and the second stage use stride 1 instead of 2 (as the widely used CIFAR variants
do), so the total downsampling is 8x and a 32x32 image ends at 4x4 before global
average pooling. Residual connections only where stride is 1 and the channel count
is unchanged, as in the paper. With 10 classes: ~2.24M parameters.
"""

from typing import List, Sequence

import torch
from torch import nn

from undercap.models.common import image_channels

# (expansion t, output channels c, repeats n, first stride s); Sandler et al. Table 2,
# with stage 2's stride changed 2 -> 1 for 32x32 inputs.
_CIFAR_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 1),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _conv_bn(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1) -> List[nn.Module]:
    conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, groups=groups, bias=False)
    return [conv, nn.BatchNorm2d(c_out)]


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = c_in * expansion
        layers: List[nn.Module] = []
        if expansion != 1:
            layers += [*_conv_bn(c_in, hidden, 1), nn.ReLU6()]
        layers += [*_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6()]
        layers += _conv_bn(hidden, c_out, 1)  # linear bottleneck: no activation
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return x + out if self.residual else out


class MobileNetV2(nn.Module):
    head_prefixes = ("head.",)

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        layers: List[nn.Module] = [*_conv_bn(in_channels, 32, 3, 1), nn.ReLU6()]
        c_in = 32
        for t, c, n, s in _CIFAR_STAGES:
            for i in range(n):
                layers.append(InvertedResidual(c_in, c, s if i == 0 else 1, t))
                c_in = c
        layers += [*_conv_bn(c_in, 1280, 1), nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build(num_classes: int, input_shape: Sequence[int]) -> MobileNetV2:
    """The registry's factory: input_shape is (channels, height, width)."""
    return MobileNetV2(image_channels(input_shape, "mobilenetv2"), num_classes)
