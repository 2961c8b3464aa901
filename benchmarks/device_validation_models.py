"""The measured runs' models, built here so that undercap's workload counter can count
them (models/workload.py: FLOPs, saved activations, DRAM traffic, kernels per step).

The registry's "resnet18" is the CIFAR variant (3x3 stem, no max-pool, 32x32 inputs);
the measured Jetson runs train the ImageNet variant at 224x224 and an SSD detector at
300x300, whose costs per sample are 10-50x larger. Both are rebuilt from their papers,
not imported (torchvision and pytorch-ssd are not dependencies):

* resnet18-imagenet: He et al., CVPR 2016, Table 1 (7x7/2 stem convolution, 3x3/2
  max-pool, four stages of two BasicBlocks); the network jetson-inference's train.py
  trains (torchvision resnet18, `--arch` default).
* ssd-mobilenet-v1: Howard et al. 2017, Table 1 (MobileNetV1 body) with the SSD300
  heads of Liu et al., ECCV 2016, as dusty-nv/pytorch-ssd's mb1-ssd lays them out
  (vision/ssd/mobilenetv1_ssd.py: features from conv11 (512 ch, 19x19) and conv13 (1024
  ch, 10x10), four extra 1x1 + 3x3/2 blocks down to 1x1, a 3x3 classification and a
  3x3 box-regression convolution per feature map, 6 anchors each).

The SSD's forward returns (batch, classes) scores averaged over its anchors, with the
box regression kept in the graph at zero weight: the counter then backpropagates
through every head as training does. The MultiBox loss itself (hard-negative mining,
a sort over ~3000 anchors per image) is not counted; it is small next to the
convolutions.
"""

from __future__ import annotations

import torch
from torch import nn

from undercap.models.resnet import resnet18_stages

ANCHORS_PER_CELL = 6


class ResNet18ImageNet(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.stages = resnet18_stages()
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def _conv_bn(c_in: int, c_out: int, stride: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()
    )


def _conv_dw(c_in: int, c_out: int, stride: int) -> nn.Module:
    """Depthwise 3x3 then pointwise 1x1, each with BatchNorm and ReLU (MobileNetV1)."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False),
        nn.BatchNorm2d(c_in),
        nn.ReLU(),
        nn.Conv2d(c_in, c_out, 1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
    )


# MobileNetV1 body (Howard et al. 2017, Table 1): (out channels, stride) per dw block
_MOBILENET_V1 = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]
_MOBILENET_V1 += [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
_EXTRAS = [(1024, 256, 512), (512, 128, 256), (256, 128, 256), (256, 128, 256)]


class SSDMobileNetV1(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        layers, c_in = [_conv_bn(3, 32, 2)], 32
        for c_out, stride in _MOBILENET_V1:
            layers.append(_conv_dw(c_in, c_out, stride))
            c_in = c_out
        self.early = nn.Sequential(*layers[:12])  # through conv11: 512 ch at 19x19
        self.late = nn.Sequential(*layers[12:])  # conv12-13: 1024 ch at 10x10
        self.extras = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, mid, 1), nn.ReLU(), nn.Conv2d(mid, out, 3, 2, 1), nn.ReLU())
            for c, mid, out in _EXTRAS
        )
        source_channels = [512, 1024] + [out for _, _, out in _EXTRAS]
        self.classify = nn.ModuleList(
            nn.Conv2d(c, ANCHORS_PER_CELL * num_classes, 3, padding=1) for c in source_channels
        )
        self.regress = nn.ModuleList(
            nn.Conv2d(c, ANCHORS_PER_CELL * 4, 3, padding=1) for c in source_channels
        )
        self.num_classes = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sources = [self.early(x)]
        sources.append(self.late(sources[0]))
        for extra in self.extras:
            sources.append(extra(sources[-1]))
        scores, boxes = [], []
        for i, src in enumerate(sources):  # one classifier and one regressor per source
            score = self.classify[i](src).flatten(2).transpose(1, 2)
            scores.append(score.reshape(x.shape[0], -1, self.num_classes))
            boxes.append(self.regress[i](src).flatten(1))
        score = torch.cat(scores, dim=1).mean(dim=1)
        return score + 0.0 * torch.cat(boxes, dim=1).mean(dim=1, keepdim=True)


BUILDERS = {"resnet18-imagenet": ResNet18ImageNet, "ssd-mobilenet-v1": SSDMobileNetV1}


def build(name: str, num_classes: int) -> nn.Module:
    return BUILDERS[name](num_classes)
