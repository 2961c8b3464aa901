"""Argument types and output helpers shared by the command modules (no torch)."""

import argparse
import json
import math
import sys
from typing import Any, Dict, List, Optional, Tuple

from undercap import defaults


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from e


def positive_float(text: str) -> float:
    x = _number(text)
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return x


def non_negative_float(text: str) -> float:
    x = _number(text)
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a non-negative number")
    return x


def fraction(text: str) -> float:
    """A number in (0, 1], e.g. a target accuracy."""
    x = positive_float(text)
    if x > 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction in (0, 1], e.g. 0.9")
    return x


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from e


def positive_int(text: str) -> int:
    x = integer(text)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return x


def int_list(text: str) -> List[int]:
    """'8,16,32' or '8..128' (powers of two from 8 to 128)."""
    text = text.strip()
    if ".." in text:
        lo_s, hi_s = text.split("..", 1)
        lo, hi = positive_int(lo_s), positive_int(hi_s)
        if lo > hi:
            raise argparse.ArgumentTypeError(f"{text!r}: lower bound above upper bound")
        out, b = [], lo
        while b <= hi:
            out.append(b)
            b *= 2
        return out
    try:
        return [positive_int(t) for t in text.split(",") if t.strip()]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from e


def float_list(text: str) -> List[float]:
    return [positive_float(t) for t in text.split(",") if t.strip()]


def shape(text: str) -> Tuple[int, ...]:
    """'3x32x32' or '3,32,32'."""
    parts = text.replace("x", ",").split(",")
    try:
        return tuple(positive_int(p) for p in parts if p.strip())
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: use e.g. 3x32x32") from e


MODEL_HELP = (
    "small-cnn, resnet18, mobilenetv2, char-transformer, or your own factory returning an "
    "nn.Module: package.module:function or path/to/file.py:function"
)
DATA_HELP = (
    "digits, npz:FILE, cifar10, cifar100, svhn, mnist, fashion-mnist, folder:DIR, "
    "text:FILE[+FILE...], or your own (train, test) torch datasets: "
    "py:package.module:function or py:path/to/file.py:function"
)


#: the flags naming users' own training code by import path, with their --help
_OBJECTIVE_FLAGS = {
    "--loss": "your loss fn(outputs, labels) -> scalar tensor (default: cross-entropy)",
    "--metric": "your target metric fn(outputs, labels) -> float, higher is better, the "
    "batch mean (default: top-1 accuracy, per position for sequences)",
    "--optimizer": "your optimizer factory(params=, model=, lr=) -> torch.optim.Optimizer; "
    "its rates (or --lr) are the rates at the largest batch, sqrt-scaled for smaller ones "
    "(default: the model's Adam/AdamW)",
    "--lr-scheduler": "your LR scheduler factory(optimizer=, steps_per_epoch=, max_steps=), "
    "stepped after every optimizer step",
    "--train-step": "your training step fn(model=, x=, y=, optimizer=, loss_fn=): zero_grad, "
    "forward, backward and optimizer.step (default: the loss's)",
}


def add_objective_args(p: Any) -> None:
    """--loss, --metric, --optimizer, --lr-scheduler and --train-step: users' own code."""
    for flag, help_ in _OBJECTIVE_FLAGS.items():
        p.add_argument(flag, metavar="IMPORT_PATH", help=help_)


def objective_kwargs(args: Any) -> Dict[str, Any]:
    """--loss, --metric and the recipe flags, as the library's keyword arguments."""
    return {
        "loss": args.loss,
        "metric": args.metric,
        "optimizer_factory": args.optimizer,
        "lr_scheduler": args.lr_scheduler,
        "train_step": args.train_step,
    }


def add_objective_choice(p: Any) -> None:
    """--objective and --energy-budget-j (select/objectives.py)."""
    p.add_argument(
        "--objective",
        choices=("time", "energy", "edp"),
        default="time",
        help="what to minimise under the cap: time to the target (the paper's, default), "
        "energy to the target, or energy x time",
    )
    p.add_argument(
        "--energy-budget-j",
        type=positive_float,
        metavar="J",
        help="a battery: the fastest configuration whose predicted energy to the target "
        "fits this many joules",
    )


def add_device_args(
    p: argparse.ArgumentParser,
    *,
    default: Optional[str] = defaults.DEVICE,
    default_text: Optional[str] = None,
) -> None:
    """--device and its companions; `default_text` describes a default the command
    works out itself (the flag's value is then None)."""
    p.add_argument(
        "--device",
        default=default,
        help="sim:jetson-nano, sim:jetson-tx2nx, sim:jetson-orin-nano, sim:jetson-xavier-nx, "
        "trace:FILE.csv (measured (b, f) replayed), jetson, nvml:<index>"
        f" (default {default_text or default})",
    )
    p.add_argument(
        "--sysfs-root", default="/", help="root of the sysfs tree for the jetson backend"
    )
    p.add_argument(
        "--read-only", action="store_true", help="measure only: never change clocks or power limits"
    )
    p.add_argument(
        "--allow-clock-control",
        action="store_true",
        help="nvml: allow locking GPU clocks (needs root or undercap-helper; off by default)",
    )
    p.add_argument(
        "--helper",
        metavar="SOCKET",
        help="lock clocks through the undercap-helper at this socket (default: "
        "$UNDERCAP_HELPER, else /run/undercap/helper.sock where it exists)",
    )


def open_device_from_args(args: argparse.Namespace, *, seed: int = 0) -> Any:
    from undercap.devices import open_device

    return open_device(
        args.device,
        sysfs_root=args.sysfs_root,
        read_only=args.read_only,
        allow_clock_control=args.allow_clock_control,
        seed=seed,
        helper=args.helper,
    )


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def training_exit_code(result: Any) -> int:
    """0 when the training reached its target; else say how close it came on stderr and
    return EXIT_TARGET_NOT_REACHED, which scripts tell from success and a user error (2)."""
    from undercap.errors import EXIT_OK, EXIT_TARGET_NOT_REACHED

    if result.reached:
        return EXIT_OK
    print(f"undercap: {result.outcome()} (exit {EXIT_TARGET_NOT_REACHED})", file=sys.stderr)
    return EXIT_TARGET_NOT_REACHED


def add_shape_args(
    p: Any, *, context_default: Optional[int] = 64, context_help: str = "64"
) -> None:
    """--data-dir, --input-shape, --context and --task, for every command that loads data."""
    p.add_argument("--data-dir", help="folder relative dataset files are under")
    p.add_argument(
        "--input-shape",
        type=shape,
        help="resize images to this shape, e.g. 3x32x32 (default: the data's)",
    )
    p.add_argument(
        "--context",
        type=positive_int,
        default=context_default,
        help=f"characters per sequence for text datasets (default {context_help})",
    )
    add_task_arg(p)


def shaped_data(args: Any, dataset: str, **fields: Any) -> Any:
    """A DataSpec of `dataset` where add_shape_args's flags say, with `fields`."""
    from undercap.data.spec import DataSpec

    return DataSpec(
        dataset,
        data_dir=args.data_dir,
        input_shape=args.input_shape,
        context=args.context,
        **fields,
    )


def add_task_arg(p: Any) -> None:
    """--task: what the model takes and is scored on, where not inferred (models/tasks.py)."""
    from undercap.models.tasks import TASK_NAMES

    p.add_argument(
        "--task",
        choices=TASK_NAMES,
        help="your own model's task, where undercap cannot infer it from the model and the data: "
        "classification (float inputs), next-token, sequence-classification, token-classification, "
        "masked-lm or seq2seq (token ids in); built-in models know theirs",
    )


DETERMINISTIC_HELP = (
    "train on the device with deterministic torch (deterministic algorithms, no cuDNN "
    "benchmarking, a fixed cuBLAS workspace): a resumed run then equals the uninterrupted "
    "one on CUDA too, not only on the CPU; slower on CUDA, and a model with an op that has "
    "no deterministic CUDA kernel stops with an error"
)


def add_precision_arg(p: Any, *, auto: bool = True) -> None:
    """--precision: fp32, fp16 or bf16 mixed precision (torch.autocast), and "auto" if `auto`."""
    p.add_argument(
        "--precision",
        choices=[*defaults.PRECISIONS, *(["auto"] if auto else [])],
        help="the arithmetic to train in: fp32, or mixed precision in fp16 (loss-scaled) or bf16"
        + (", or auto: every precision the device runs, chosen with (b, f)" if auto else "")
        + f" (default {defaults.PRECISION})",
    )


def share(text: str) -> float:
    """A share of a dataset: "10%" or 0.1, in (0, 1]."""
    t = text.strip()
    x = positive_float(t[:-1]) / 100 if t.endswith("%") else positive_float(t)
    if x > 1.0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a share is at most 100%: give a percentage (10%) or a fraction (0.1)"
        )
    return x


def add_slice_args(p: Any, *, of: str) -> None:
    """--proxy-slice and --proxy-slice-seed: r(b) from a slice of `of`'s training split."""
    p.add_argument(
        "--proxy-slice",
        type=share,
        metavar="PCT",
        help=f"estimate r(b) on this share of {of} training split, e.g. "
        f"{100 * defaults.SLICE_FRACTION:g}%%: class-balanced, with its own 80/20 held-out "
        "part (the test split is never read); its target is the one given, capped at "
        f"{defaults.SLICE_TARGET_FRACTION:g} x the best its largest batch reaches",
    )
    p.add_argument(
        "--proxy-slice-seed",
        type=int,
        default=0,
        metavar="N",
        help="which slice: its draw and its 80/20 split (default 0)",
    )


class _Removed(argparse.Action):
    """A flag undercap 0.3.0 removed: using it is the one error line saying why."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        from undercap.errors import removed

        raise removed(self.dest)


def add_removed_flags(p: argparse.ArgumentParser) -> None:
    """The flags undercap 0.3.0 removed (errors.REMOVED_IN_0_3), hidden from --help."""
    from undercap.errors import REMOVED_IN_0_3, boolean_removed

    for name in REMOVED_IN_0_3:
        flags = ["--" + name.replace("_", "-")]
        flags += ["--no-" + name.replace("_", "-")] if boolean_removed(name) else []
        p.add_argument(*flags, dest=name, nargs="?", action=_Removed, help=argparse.SUPPRESS)
