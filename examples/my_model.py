"""A model undercap has never seen: a depthwise-separable CNN (DS-CNN), the family of
small keyword-spotting and vision nets for microcontrollers and Jetsons (Zhang et al.
2017, "Hello Edge: Keyword Spotting on Microcontrollers", Sec. 3.4).

Use it with `--model examples/my_model.py:build`. undercap calls `build` with the
keyword arguments its signature names: `num_classes` (from the data) and
`input_shape` (channels, height, width), and counts its FLOPs, bytes and kernels from
the real module exactly as for the built-in models.
"""

from __future__ import annotations

from typing import Sequence

from torch import nn


def _ds_block(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    """3x3 depthwise + 1x1 pointwise convolution, each with BatchNorm and ReLU."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_in, 3, stride=stride, padding=1, groups=c_in, bias=False),
        nn.BatchNorm2d(c_in),
        nn.ReLU(),
        nn.Conv2d(c_in, c_out, 1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
    )


def build(num_classes: int, input_shape: Sequence[int], width: int = 48) -> nn.Module:
    channels = int(input_shape[0])
    return nn.Sequential(
        nn.Conv2d(channels, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        _ds_block(width, width, 1),
        _ds_block(width, 2 * width, 2),
        _ds_block(2 * width, 2 * width, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, num_classes),
    )
