"""Image folders: one sub-folder per class (the ImageFolder layout).

    DIR/<class>/<image>.png|jpg|jpeg|bmp|gif|webp|tif|tiff

Classes are the sub-folder names in sorted order (class index = position). When DIR
holds train/ and test/ (or val/) folders that each follow this layout, that is the
official split. Images are decoded with Pillow; a folder of grayscale images stays
1-channel, anything else becomes RGB. Images whose size differs from the target
(the model's input size, or else the first image's) are resized bilinearly.
"""

import sys
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
from tqdm import tqdm

from undercap.data.images import RawImages
from undercap.errors import DataError, require

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
_GRAY_MODES = {"1", "L", "LA", "I", "I;16", "F"}


def _list(root: Path, classes: List[str]) -> Tuple[List[Path], List[int]]:
    files, labels = [], []
    for i, c in enumerate(classes):
        d = root / c
        if not d.is_dir():
            continue
        found = sorted(p for p in d.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        files += found
        labels += [i] * len(found)
    return files, labels


def _decode(files: List[Path], size_hw: Optional[Tuple[int, int]]) -> np.ndarray:
    Image = require("PIL.Image", "images", "reading image folders")
    images, gray = [], True
    quiet = len(files) < 2000  # a progress bar for large folders only
    bar = tqdm(
        files, desc="decoding images", unit="img", file=sys.stderr, disable=quiet, leave=False
    )
    for f in bar:
        try:
            with Image.open(f) as im:
                im.load()
                gray = gray and im.mode in _GRAY_MODES
                images.append(im.copy())
        except (Image.UnidentifiedImageError, OSError) as e:
            raise DataError(f"folder: {f} is not a readable image ({type(e).__name__})") from e
    mode = "L" if gray else "RGB"
    h, w = size_hw if size_hw is not None else (images[0].height, images[0].width)
    arrays = []
    for im in images:
        im = im.convert(mode)
        if im.size != (w, h):
            im = im.resize((w, h), Image.BILINEAR)
        arrays.append(np.asarray(im, dtype=np.uint8))
    return np.stack(arrays)  # (N, H, W) or (N, H, W, 3)


def read_folder(root: Path, size_hw: Optional[Tuple[int, int]] = None) -> RawImages:
    if not root.is_dir():
        raise DataError(f"folder: {root} is not a directory; expected DIR/<class>/<images>")
    test_root = next((root / d for d in ("test", "val") if (root / d).is_dir()), None)
    official = (root / "train").is_dir() and test_root is not None
    train_root = root / "train" if official else root
    class_dirs = (p for p in train_root.iterdir() if p.is_dir() and not p.name.startswith("."))
    classes = [p.name for p in sorted(class_dirs)]
    files, labels = _list(train_root, classes)
    if not files:
        raise DataError(
            f"folder: no images under {train_root}/<class>/; expected one sub-folder per class "
            f"holding {', '.join(sorted(IMAGE_SUFFIXES))} files"
        )
    x = _decode(files, size_hw)
    size_hw = size_hw or (x.shape[1], x.shape[2])
    xt = yt = None
    if official:
        test_files, test_labels = _list(test_root, classes)
        if not test_files:
            raise DataError(f"folder: no images under {test_root}/<class>/ for the test split")
        xt, yt = _decode(test_files, size_hw), np.asarray(test_labels, dtype=np.int64)
        if xt.ndim != x.ndim:  # one split gray, the other colour: make both colour
            x, xt = (a if a.ndim == 4 else np.repeat(a[..., None], 3, axis=3) for a in (x, xt))
    return RawImages(x, np.asarray(labels, dtype=np.int64), xt, yt, len(classes))
