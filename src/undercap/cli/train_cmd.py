"""`undercap train`: train to a target accuracy on the device at the chosen (b, f).

The batch size and frequency come from flags or from `--from-selection`, the JSON
that `undercap select --json` prints; the learning rate is scaled from the largest
batch of the efficiency estimate the selection used (same rule as estimation).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from undercap.cli.common import add_device_args, positive_float, positive_int, shape


def fraction(text: str) -> float:
    x = positive_float(text)
    if x > 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction in (0, 1], e.g. 0.9")
    return x


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train to a target accuracy on the device at the chosen batch size and frequency",
        description="Lock the chosen GPU frequency, fine-tune the model on the target data "
        "until the target accuracy, keep power under the limit (stepping the clock down if "
        "it is exceeded for longer than the guard window), and report time-to-accuracy, "
        "energy and power. Device settings are restored on every exit path.",
    )
    add_device_args(p)
    g = p.add_argument_group("what to train")
    g.add_argument(
        "--model",
        default=None,
        help="small-cnn, resnet18, mobilenetv2, char-transformer (default: the selection's)",
    )
    g.add_argument(
        "--dataset",
        required=True,
        help="target data: digits, npz:FILE, cifar10, mnist, folder:DIR, text:FILE",
    )
    g.add_argument("--data-dir", default=None, help="folder relative dataset files are under")
    g.add_argument(
        "--input-shape",
        type=shape,
        default=None,
        help="resize images to this shape, e.g. 3x32x32 (default: the data's)",
    )
    g.add_argument(
        "--context",
        type=positive_int,
        default=64,
        help="characters per sequence for text datasets (default 64)",
    )
    g.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="use at most this many samples of the dataset (quick runs)",
    )
    g.add_argument(
        "--pretrained",
        type=Path,
        default=None,
        help="weights from `undercap pretrain` to fine-tune (default: random init)",
    )
    c = p.add_argument_group("configuration")
    c.add_argument(
        "--from-selection",
        type=Path,
        default=None,
        help="JSON from `undercap select --json`: batch size, frequency, power limit",
    )
    c.add_argument("--batch-size", type=positive_int, default=None)
    c.add_argument(
        "--freq-mhz",
        type=positive_float,
        default=None,
        help="GPU frequency to lock (default: leave the clocks as they are)",
    )
    c.add_argument(
        "--power-limit",
        type=positive_float,
        default=None,
        help="power limit in W the guard enforces (default: the selection's)",
    )
    c.add_argument(
        "--lr",
        type=positive_float,
        default=None,
        help="learning rate at the largest batch (default: the estimate's or model's)",
    )
    c.add_argument(
        "--max-batch-size",
        type=positive_int,
        default=None,
        help="largest batch of the estimate, for sqrt LR scaling "
        "(default: the selection's estimate, else --batch-size)",
    )
    r = p.add_argument_group("run")
    r.add_argument("--target-accuracy", type=fraction, required=True)
    r.add_argument(
        "--max-samples",
        type=positive_int,
        default=100_000,
        help="stop after this many samples if the target is not reached",
    )
    r.add_argument(
        "--eval-every",
        type=positive_int,
        default=2_000,
        help="evaluate every this many training samples (default 2000)",
    )
    r.add_argument(
        "--eval-max-samples",
        type=positive_int,
        default=None,
        help="evaluate on at most this many test samples",
    )
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--checkpoint-dir", type=Path, default=None)
    r.add_argument(
        "--checkpoint-every-s",
        type=positive_float,
        default=60.0,
        help="checkpoint every this many device seconds of training (default 60)",
    )
    r.add_argument("--checkpoint-every-samples", type=positive_int, default=None)
    r.add_argument(
        "--resume", action="store_true", help="continue the run checkpointed in --checkpoint-dir"
    )
    r.add_argument(
        "--guard-window-s",
        type=positive_float,
        default=1.0,
        help="step the clock down when power exceeds the limit for this long (default 1 s)",
    )
    r.add_argument("--sample-rate-hz", type=positive_float, default=100.0)
    r.add_argument("--torch-device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("-o", "--output", type=Path, default=None, help="write the result JSON here")
    r.add_argument("--json", action="store_true", help="print the result JSON, not a summary")
    p.set_defaults(func=run)


def _from_selection(args: argparse.Namespace) -> dict[str, Any]:
    """Fill batch size, frequency, power limit, model and LR scaling from the selection
    JSON (explicit flags win) and its efficiency estimate."""
    from undercap.artifacts import load_json
    from undercap.errors import ArtifactError

    sel = load_json(args.from_selection, what="selection")
    for key in ("batch_size", "freq_mhz", "power_limit_w"):
        if key not in sel:
            raise ArtifactError(
                f"{args.from_selection} has no {key!r}; pass the output of `undercap select --json`"
            )
    if args.model is not None and sel.get("model") not in (None, args.model):
        raise ArtifactError(
            f"{args.from_selection} was selected for model {sel['model']!r}, not {args.model!r}"
        )
    out = {
        "model": args.model or sel.get("model"),
        "batch_size": args.batch_size or int(sel["batch_size"]),
        "freq_mhz": args.freq_mhz or float(sel["freq_mhz"]),
        "power_limit_w": args.power_limit or sel["power_limit_w"],
        "base_lr": args.lr,
        "max_batch_size": args.max_batch_size,
    }
    eff_cfg = _efficiency_config(sel.get("efficiency"), args.from_selection)
    if out["max_batch_size"] is None and eff_cfg.get("b_max"):
        out["max_batch_size"] = int(eff_cfg["b_max"])
    if out["base_lr"] is None and eff_cfg.get("base_lr"):
        out["base_lr"] = float(eff_cfg["base_lr"])
    return out


def _efficiency_config(path: str | None, sel_path: Path) -> dict[str, Any]:
    """The config block of the efficiency estimate the selection used ({} if absent)."""
    from undercap.artifacts import load_json

    if not path:
        return {}
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        p = sel_path.parent / p
    if not p.exists():
        print(
            f"note: {path} not found; LR scaled from --max-batch-size or the batch size",
            file=sys.stderr,
        )
        return {}
    cfg = load_json(p, what="efficiency").get("config", {})
    return cfg if isinstance(cfg, dict) else {}


def _choice(args: argparse.Namespace) -> dict[str, Any]:
    from undercap.errors import UndercapError

    if args.from_selection is not None:
        choice = _from_selection(args)
    else:
        choice = {
            "model": args.model,
            "batch_size": args.batch_size,
            "freq_mhz": args.freq_mhz,
            "power_limit_w": args.power_limit,
            "base_lr": args.lr,
            "max_batch_size": args.max_batch_size,
        }
    if choice["model"] is None:
        raise UndercapError("--model is required (or --from-selection with a model)")
    if choice["batch_size"] is None:
        raise UndercapError("--batch-size is required (or --from-selection)")
    return choice


def run(args: argparse.Namespace) -> int:
    from undercap.cli.common import open_device_from_args, print_json
    from undercap.models import default_input_shape
    from undercap.pretrain import DataSpec, load_splits
    from undercap.train import train_on_device
    from undercap.train_result import save_train_result

    choice = _choice(args)
    shape_ = args.input_shape
    if shape_ is None and choice["model"] != "char-transformer":
        shape_ = default_input_shape(choice["model"])
    data = load_splits(
        DataSpec(
            args.dataset,
            data_dir=args.data_dir,
            input_shape=shape_,
            context=args.context,
            limit=args.limit,
        )
    )
    with open_device_from_args(args, seed=args.seed) as device:
        result = train_on_device(
            device,
            choice["model"],
            data,
            batch_size=choice["batch_size"],
            freq_mhz=choice["freq_mhz"],
            power_limit_w=choice["power_limit_w"],
            target_accuracy=args.target_accuracy,
            max_samples=args.max_samples,
            eval_every_samples=args.eval_every,
            eval_max_samples=args.eval_max_samples,
            base_lr=choice["base_lr"],
            max_batch_size=choice["max_batch_size"],
            pretrained=args.pretrained,
            seed=args.seed,
            checkpoint_dir=args.checkpoint_dir,
            checkpoint_every_s=args.checkpoint_every_s,
            checkpoint_every_samples=args.checkpoint_every_samples,
            resume=args.resume,
            guard_window_s=args.guard_window_s,
            sample_rate_hz=args.sample_rate_hz,
            torch_device=args.torch_device,
            progress=not args.no_progress,
        )
    if args.output is not None:
        save_train_result(args.output, result)
    if args.json:
        print_json(result.to_dict())
    else:
        print("\n".join(result.summary_lines()))
        if args.output is not None:
            print(f"wrote {args.output}")
    return 0
