"""Benchmark: one evaluation of the CIFAR held-out split on a CPU, the way dense
estimates evaluate and the way sparse ones do, side by side in one run.

The small CNN trained for 4,000 samples on a CIFAR-10 quarter (so batch norm's running
statistics are real), then the 2,500 held-out images evaluated (one torch thread)
in turn, `--repeats` times each, alternating; the same on the bundled 8x8 digits
(1,200 training images, 300 held-out: the test suite's estimate job):

* dense: batches of 512, the images as stored (NCHW), the model as trained;
* batches of 128, channels-last images;
* the same with batch norm folded into the convolution before it (train/loop/fold.py; the
  fold's own cost included: a sparse run folds once per grid point it looks at).

Prints the median seconds of each, the ratios to dense, and how many images' verdicts
differ from dense's (argmax of the logits).

    .venv/bin/python benchmarks/eval_speed.py            # ~1 min
Skips (exit 0) without the data (data/: python scripts/make_data.py all).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as H

#: the CIFAR job's split, and the suite's 300 bundled digits (8x8), where the fold's own
#: cost is most of an evaluation
JOBS = (
    ("CIFAR-10 quarter, 2,500 held-out images (32x32x3)", "npz:images/cifar10-quarter-a.npz", None),
    ("bundled digits, 300 held-out images (8x8)", "digits", 1500),
)


def trained_model(spec: str, data_dir: Path, limit: int | None = None) -> tuple[Any, Any, Any]:
    """The small CNN after 4,000 training samples (or every one there is, once), and the
    held-out (x, y)."""
    import torch

    from undercap.data import load_dataset
    from undercap.models.registry import model_spec

    splits = load_dataset(spec, data_dir=data_dir, limit=limit)
    torch.manual_seed(0)
    shape = tuple(splits.x_train.shape[1:])
    model = model_spec("small-cnn").build(num_classes=splits.num_classes, input_shape=shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for i in range(0, min(4000, len(splits.x_train)), 32):
        xb, yb = splits.x_train[i : i + 32], splits.y_train[i : i + 32]
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), splits.x_test, splits.y_test


def ways(model: Any, x: Any) -> dict[str, Callable[[], Any]]:
    import torch

    from undercap.train.loop.fold import folded

    xc = x.contiguous(memory_format=torch.channels_last)

    def run(m: Any, xs: Any, bs: int) -> Any:
        with torch.no_grad():
            return torch.cat([m(xs[i : i + bs]).argmax(-1) for i in range(0, len(xs), bs)])

    return {
        "dense: 512, NCHW": lambda: run(model, x, 512),
        "128, channels-last": lambda: run(model, xc, 128),
        "128, channels-last, folded": lambda: run(folded(model), xc, 128),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=H.DATA)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    if not H.have_data(args.data_dir):
        return 0
    import torch

    torch.set_num_threads(1)
    for title, spec, limit in JOBS:
        print(title)
        measure(*trained_model(spec, args.data_dir, limit)[:2], args.repeats)
    return 0


def measure(model: Any, x: Any, repeats: int) -> None:
    fns = ways(model, x)
    base = {name: fn() for name, fn in fns.items()}  # also warms each path up
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            elapsed = H.stopwatch()
            fn()
            seconds[name].append(elapsed())
    dense = statistics.median(seconds["dense: 512, NCHW"])
    print(f"  small CNN, 1 thread, median of {repeats}:")
    for name, s in seconds.items():
        med = statistics.median(s)
        diff = int((base[name] != base["dense: 512, NCHW"]).sum())
        print(f"  {name:28s} {med * 1e3:8.1f} ms  {dense / med:4.2f}x  verdicts differing: {diff}")


if __name__ == "__main__":
    sys.exit(main())
