"""Datasets in the formats users have on disk, plus bundled zero-download defaults.

`load_dataset(spec, data_dir=..., input_shape=...)` returns a `Splits` (datasets/base.py).
"""

from undercap.datasets.base import Splits

__all__ = ["Splits"]
