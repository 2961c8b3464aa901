"""Argument types and output helpers shared by the command modules (no torch)."""

import argparse
import json
import math
import sys
from typing import Any, Dict, List, Optional, Tuple

from undercap import defaults


def positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from e
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return x


def fraction(text: str) -> float:
    """A number in (0, 1], e.g. a target accuracy."""
    x = positive_float(text)
    if x > 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction in (0, 1], e.g. 0.9")
    return x


def positive_int(text: str) -> int:
    try:
        x = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from e
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


def add_objective_args(p: Any) -> None:
    """--loss and --metric: users' own loss and target metric by import path."""
    p.add_argument(
        "--loss",
        default=None,
        metavar="IMPORT_PATH",
        help="your loss fn(outputs, labels) -> scalar tensor (default: cross-entropy)",
    )
    p.add_argument(
        "--metric",
        default=None,
        metavar="IMPORT_PATH",
        help="your target metric fn(outputs, labels) -> float, higher is better, the "
        "batch mean (default: top-1 accuracy, per position for sequences)",
    )
    p.add_argument(
        "--optimizer",
        default=None,
        metavar="IMPORT_PATH",
        help="your optimizer factory(params=, model=, lr=) -> torch.optim.Optimizer; its "
        "rates (or --lr) are the rates at the largest batch, sqrt-scaled for smaller ones "
        "(default: the model's Adam/AdamW)",
    )
    p.add_argument(
        "--lr-scheduler",
        default=None,
        metavar="IMPORT_PATH",
        help="your LR scheduler factory(optimizer=, steps_per_epoch=, max_steps=), "
        "stepped after every optimizer step",
    )
    p.add_argument(
        "--train-step",
        default=None,
        metavar="IMPORT_PATH",
        help="your training step fn(model=, x=, y=, optimizer=, loss_fn=): zero_grad, "
        "forward, backward and optimizer.step (default: the loss's)",
    )


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
        default=None,
        metavar="J",
        help="a battery: the fastest configuration whose predicted energy to the target "
        "fits this many joules",
    )


def add_schedule_args(p: Any) -> None:
    """A cap that changes during training (train/cap.py); `cap_of` makes the one cap."""
    p.add_argument(
        "--power-schedule",
        default=None,
        metavar="CSV",
        help="the cap changes during training: CSV time_s,power_limit_w (each row holds "
        "until the next; device-clock seconds from the start of training; none = no cap, "
        "0 = no power); (b, f) is re-selected at every change, training pauses when "
        "nothing fits (`undercap solar` makes one from irradiance)",
    )
    p.add_argument(
        "--power-source",
        default=None,
        metavar="FILE",
        help="live cap: a file another program rewrites with the current limit in W "
        "(or none), read every --poll-s seconds",
    )
    p.add_argument(
        "--poll-s",
        type=positive_float,
        default=defaults.POWER_SOURCE_POLL_S,
        help=f"how often --power-source is read (default {defaults.POWER_SOURCE_POLL_S:g} s)",
    )
    p.add_argument(
        "--max-wait-s",
        type=positive_float,
        default=defaults.MAX_POWER_WAIT_S,
        metavar="S",
        help="when the changing cap lets no configuration run, training pauses (asleep) "
        "for at most this many seconds at a time, then stops with exit 4 after a "
        f"checkpoint (default {defaults.MAX_POWER_WAIT_S:g} s)",
    )


def cap_of(args: argparse.Namespace, *, default_w: Optional[float] = None) -> Any:
    """The run's one cap (train/cap.py) from --power-limit (a FixedCap, None: not
    given), --power-schedule or --power-source, at most one of them; none given: a
    fixed `default_w` (a selection's limit; None: no cap)."""
    from undercap.train.cap import FixedCap, cap_from

    if args.power_limit is None and not (args.power_schedule or args.power_source):
        return FixedCap(default_w)
    return cap_from(
        args.power_limit, args.power_schedule, args.power_source, args.poll_s, args.max_wait_s
    )


def add_device_args(
    p: argparse.ArgumentParser,
    *,
    default: Optional[str] = defaults.DEVICE,
    default_text: Optional[str] = None,
) -> None:
    """--device and its companions; `default_text` describes a default the command
    works out itself (the flag's value is then None)."""
    shown = default_text or default
    p.add_argument(
        "--device",
        default=default,
        required=default is None and default_text is None,
        help="sim:jetson-nano, sim:jetson-tx2nx, sim:jetson-orin-nano, sim:jetson-xavier-nx, "
        "trace:FILE.csv (measured (b, f) replayed), jetson, nvml:<index>"
        + (f" (default {shown})" if shown else ""),
    )
    p.add_argument(
        "--sysfs-root", default="/", help="root of the sysfs tree for the jetson backend"
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        help="measure only: never change clocks or power limits",
    )
    p.add_argument(
        "--allow-clock-control",
        action="store_true",
        help="nvml: allow locking GPU clocks (needs root or undercap-helper; off by default)",
    )
    p.add_argument(
        "--helper",
        default=None,
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
    return EXIT_TARGET_NOT_REACHED, so scripts can tell a miss from success and from a
    user error (2)."""
    from undercap.errors import EXIT_OK, EXIT_TARGET_NOT_REACHED

    if result.reached:
        return EXIT_OK
    print(f"undercap: {result.outcome()} (exit {EXIT_TARGET_NOT_REACHED})", file=sys.stderr)
    return EXIT_TARGET_NOT_REACHED


def add_shape_args(
    p: Any, *, context_default: Optional[int] = 64, context_help: str = "64"
) -> None:
    """Where data files are and the shape a model takes them in (every command that
    loads data), with --task."""
    p.add_argument("--data-dir", default=None, help="folder relative dataset files are under")
    p.add_argument(
        "--input-shape",
        type=shape,
        default=None,
        help="resize images to this shape, e.g. 3x32x32 (default: the data's)",
    )
    p.add_argument(
        "--context",
        type=positive_int,
        default=context_default,
        help=f"characters per sequence for text datasets (default {context_help})",
    )
    add_task_arg(p)


def add_task_arg(p: Any) -> None:
    """--task: what the model takes and is scored on, where it cannot be inferred
    (models/tasks.py)."""
    from undercap.models.tasks import TASK_NAMES

    p.add_argument(
        "--task",
        choices=TASK_NAMES,
        default=None,
        help="your own model's task, where undercap cannot infer it from the model and "
        "the data: classification (float inputs), next-token, sequence-classification, "
        "token-classification, masked-lm or seq2seq (token ids in); built-in models "
        "know theirs",
    )


DETERMINISTIC_HELP = (
    "train on the device with deterministic torch (deterministic algorithms, no cuDNN "
    "benchmarking, a fixed cuBLAS workspace): a resumed run then equals the uninterrupted "
    "one on CUDA too, not only on the CPU; slower on CUDA, and a model with an op that has "
    "no deterministic CUDA kernel stops with an error"
)


def add_precision_arg(p: Any, *, auto: bool = True, default: Optional[str] = None) -> None:
    """--precision: fp32, fp16 or bf16 mixed precision (torch.autocast), or "auto"
    (every precision the device runs, chosen with (b, f)) where `auto`."""
    choices = [*defaults.PRECISIONS, *(["auto"] if auto else [])]
    shown = default or defaults.PRECISION
    p.add_argument(
        "--precision",
        choices=choices,
        default=default,
        help="the arithmetic to train in: fp32, or mixed precision in fp16 (loss-scaled) or "
        "bf16"
        + (", or auto: every precision the device runs, chosen with (b, f)" if auto else "")
        + f" (default {shown})",
    )


def non_negative_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from e
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a non-negative number")
    return x


def add_margin_arg(p: Any) -> None:
    """--power-margin-w, for every command that selects (select, run, compare, train)."""
    p.add_argument(
        "--power-margin-w",
        type=non_negative_float,
        default=None,
        metavar="W",
        help="safety margin added to every profiled peak power before comparing it with "
        "the limit (default: each configuration's own, sized while profiling from the "
        "sensor's noise and the peak's spread; 0: none, the paper's test)",
    )


class _Removed(argparse.Action):
    """A flag undercap 0.3.0 removed: using it is the one error line saying why."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        from undercap.errors import removed

        raise removed(self.dest)


def add_removed_flags(p: argparse.ArgumentParser) -> None:
    """The flags of the options undercap 0.3.0 removed (errors.REMOVED_IN_0_3), hidden
    from --help: a user who still passes one gets one line saying what replaced it."""
    from undercap.errors import REMOVED_IN_0_3, boolean_removed

    for name in REMOVED_IN_0_3:
        flags = ["--" + name.replace("_", "-")]
        flags += ["--no-" + name.replace("_", "-")] if boolean_removed(name) else []
        p.add_argument(*flags, dest=name, nargs="?", action=_Removed, help=argparse.SUPPRESS)


def power_limit(text: str) -> Optional[float]:
    """'5' -> 5.0 W, 'none' -> no limit."""
    if text.strip().lower() in ("none", "no", "off", "inf"):
        return None
    return positive_float(text)


def fixed_cap(text: str) -> Any:
    """--power-limit: '5' -> a 5 W cap, 'none' -> no cap (train/cap.FixedCap)."""
    from undercap.train.cap import FixedCap

    return FixedCap(power_limit(text))


def power_limits(text: str) -> List[Optional[float]]:
    """'5,7,none' -> [5.0, 7.0, None]."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give power limits such as 5,7,none")
    out = [power_limit(t) for t in items]
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{text!r}: power limits must be distinct")
    return out
