"""Checks the built-in models' factories share (torch-free)."""

from typing import Sequence

from undercap.errors import UndercapError


def image_channels(input_shape: Sequence[int], name: str) -> int:
    """The channel count of an image input shape (channels, height, width)."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3:
        raise UndercapError(f"{name} needs input_shape (channels, height, width), got {shape}")
    return shape[0]
