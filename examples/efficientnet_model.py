"""A model from a third-party package: EfficientNet-B0 from `efficientnet_pytorch`
(pip install efficientnet_pytorch; pure PyTorch, Tan & Le 2019).

Use it with `--model examples/efficientnet_model.py:build --input-shape 3x32x32`.
Three lines of glue are all undercap needs: a factory that takes `num_classes` and
`input_shape` and returns the nn.Module.
"""

from __future__ import annotations

from typing import Sequence


def build(num_classes: int, input_shape: Sequence[int]):  # type: ignore[no-untyped-def]
    from efficientnet_pytorch import EfficientNet

    channels, height, _width = (int(s) for s in input_shape)
    return EfficientNet.from_name(
        "efficientnet-b0", num_classes=num_classes, in_channels=channels, image_size=height
    )
