"""`undercap train`: train to a target accuracy on the device at the chosen (b, f).

The batch size and frequency come from flags or from `--from-selection` (a selection
artifact from `select --json`, `run` or `compare`); the learning rate is scaled from
the largest batch of the estimate the selection used (same rule as estimation), and
a selection from `run` also brings the data, weights and budgets that run used.
"""

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from undercap import defaults
from undercap.cli.cap_args import add_margin_arg, add_schedule_args, cap_of
from undercap.cli.common import (
    DATA_HELP,
    DETERMINISTIC_HELP,
    MODEL_HELP,
    add_device_args,
    add_objective_args,
    add_objective_choice,
    add_removed_flags,
    add_shape_args,
    fraction,
    objective_kwargs,
    positive_float,
    positive_int,
)
from undercap.cli.outputs import declare_outputs

if TYPE_CHECKING:  # torch-free until a command runs
    from undercap.artifacts.selection import Selection
    from undercap.train.session.follow import Reselector
    from undercap.train.spec import RunOptions, TrainSpec


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train to a target accuracy on the device at the chosen batch size and frequency",
        description="Lock the chosen GPU frequency, fine-tune the model on the target data "
        "until the target accuracy, keep power under the limit (stepping the clock down if "
        "it is exceeded for longer than the guard window), and report time-to-accuracy, "
        "energy and power. Device settings are restored on every exit path.",
    )
    add_device_args(p, default=None, default_text=f"the selection's device, else {defaults.DEVICE}")
    g = p.add_argument_group("what to train")
    g.add_argument("--model", help=MODEL_HELP + " (default: the selection's)")
    g.add_argument(
        "--dataset",
        help="target data: " + DATA_HELP + " (default: the data of the `run` the "
        "selection came from)",
    )
    add_shape_args(g, context_default=None, context_help="the selection's, else 64")
    g.add_argument(
        "--limit",
        type=positive_int,
        help="use at most this many samples of the dataset (quick runs)",
    )
    g.add_argument(
        "--pretrained",
        type=Path,
        help="weights from `undercap pretrain` to fine-tune (default: the selection's, "
        "else a random init)",
    )
    c = p.add_argument_group("configuration")
    c.add_argument(
        "--from-selection",
        type=Path,
        help="selection from `undercap select --json`, `run` or `compare`: batch size, "
        "frequency, power limit, LR scaling and (from `run`) how it trained",
    )
    c.add_argument("--batch-size", type=positive_int)
    c.add_argument(
        "--profile",
        type=Path,
        help="with a changing cap: the profile to re-select from (default: the selection's)",
    )
    c.add_argument(
        "--efficiency",
        type=Path,
        help="with a changing cap: r(b) to re-select with (default: the selection's)",
    )
    add_schedule_args(c)
    add_objective_choice(c)
    c.add_argument(
        "--freq-mhz",
        type=positive_float,
        help="GPU frequency to lock (default: leave the clocks as they are)",
    )
    c.add_argument(
        "--power-limit",
        type=positive_float,
        help="power limit in W the guard enforces (default: the selection's)",
    )
    c.add_argument(
        "--lr",
        type=positive_float,
        help="learning rate at the largest batch (default: the estimate's or model's)",
    )
    c.add_argument(
        "--max-batch-size",
        type=positive_int,
        help="largest batch of the estimate, for sqrt LR scaling "
        "(default: the selection's estimate, else --batch-size)",
    )
    r = p.add_argument_group("run")
    r.add_argument(
        "--target-accuracy",
        type=fraction,
        help="stop at this test accuracy (default: the selection's run's)",
    )
    r.add_argument(
        "--max-samples",
        type=positive_int,
        help="stop after this many samples if the target is not reached "
        f"(default: the selection's, else {defaults.TRAIN_MAX_SAMPLES})",
    )
    r.add_argument(
        "--eval-every",
        type=positive_int,
        help="evaluate every this many training samples "
        f"(default: the selection's, else {defaults.TRAIN_EVAL_EVERY_SAMPLES})",
    )
    r.add_argument(
        "--eval-max-samples", type=positive_int, help="evaluate on at most this many test samples"
    )
    r.add_argument(
        "--eval-schedule",
        choices=("sparse", "dense"),
        help="sparse: far from the target look less often, and stop a look once the part of the "
        "held-out split scored rules the target out (the same time to accuracy, a fraction of the "
        "evaluation time); dense: the whole split at every --eval-every point (default: the "
        f"selection's, else {defaults.TRAIN_EVAL_SCHEDULE})",
    )
    r.add_argument("--seed", type=int, help="default: the selection's, else 0")
    r.add_argument("--checkpoint-dir", type=Path)
    r.add_argument(
        "--checkpoint-every-s",
        type=positive_float,
        default=defaults.CHECKPOINT_EVERY_S,
        help=f"checkpoint every this many device seconds of training "
        f"(default {defaults.CHECKPOINT_EVERY_S:g})",
    )
    r.add_argument("--checkpoint-every-samples", type=positive_int)
    r.add_argument(
        "--resume", action="store_true", help="continue the run checkpointed in --checkpoint-dir"
    )
    r.add_argument(
        "--guard-window-s",
        type=positive_float,
        default=defaults.GUARD_WINDOW_S,
        help="the guard steps the clock down when the mean power over a window this long "
        f"exceeds the limit (default {defaults.GUARD_WINDOW_S:g} s, widened to two updates of "
        "a slower power sensor)",
    )
    r.add_argument("--sample-rate-hz", type=positive_float, default=defaults.TRAIN_SAMPLE_RATE_HZ)
    r.add_argument("--torch-device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    r.add_argument("--deterministic", action="store_true", help=DETERMINISTIC_HELP)
    r.add_argument(
        "--precision",
        choices=list(defaults.PRECISIONS),
        help="fp32, or mixed precision in fp16 (loss-scaled) or bf16 (default: the "
        "selection's, else fp32)",
    )
    add_objective_args(r)
    add_margin_arg(r)  # used where train selects: a changing cap re-selects (b, f)
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("-o", "--output", type=Path, help="write the result JSON here")
    r.add_argument(
        "--eval-log",
        type=Path,
        metavar="FILE",
        help="log every evaluation (samples, device time, energy, accuracy, power) to this "
        ".csv or .jsonl file (a fresh run starts it over; --resume keeps it to the checkpoint)",
    )
    r.add_argument(
        "--tensorboard-dir",
        type=Path,
        metavar="DIR",
        help="also write every evaluation as TensorBoard scalars here (pip install "
        "'undercap[tensorboard]')",
    )
    r.add_argument("--json", action="store_true", help="print the result JSON, not a summary")
    add_removed_flags(r)
    p.set_defaults(func=run)
    declare_outputs(
        p,
        files=("output", "eval_log"),
        folders=("checkpoint_dir", "tensorboard_dir"),
        locked=("checkpoint_dir",),
    )


def _resolve(args: argparse.Namespace, sel: "Optional[Selection]") -> "TrainSpec":
    """The run's TrainSpec: the selection's plan (how the run it came from trained) at
    its choice, else the defaults, with every flag given taking precedence."""
    from undercap.errors import ArtifactError, UndercapError
    from undercap.train.spec import Plan, TrainSpec

    if sel and args.model and sel.model not in (None, args.model):
        raise ArtifactError(
            f"{args.from_selection} was selected for model {sel.model!r}, not {args.model!r}"
        )
    plan = Plan.from_selection(sel) if sel else Plan(args.model, args.batch_size or 0, None)
    flags = {name: getattr(args, flag) for name, flag in _PLAN_FLAGS.items()}
    flags.update(objective_kwargs(args))
    plan = dataclasses.replace(plan, **{k: v for k, v in flags.items() if v is not None})
    plan = dataclasses.replace(plan, deterministic=plan.deterministic or args.deterministic)
    for value, flag in ((plan.model, "--model"), (plan.batch_size, "--batch-size")):
        if not value:
            raise UndercapError(f"{flag} is required (or --from-selection)")
    spec = TrainSpec.of(
        plan,
        # a read-only selection observed its clock: train at the clocks as found
        freq_mhz=args.freq_mhz or (sel.lock_mhz() if sel else None),
        cap=cap_of(args, default_w=sel.power_limit_w if sel else None),
        batch_ladder=sel.batch_ladder() if sel else (),
        guard_window_s=args.guard_window_s,
        torch_device=args.torch_device,
    )
    spec.validate()  # a missing target, a bad budget: one line before any work
    if args.eval_every is not None and args.eval_every > spec.max_samples:
        raise UndercapError(
            f"--eval-every {args.eval_every} is coarser than the sample budget "
            f"{spec.max_samples}: the time to accuracy would be one evaluation at the end"
        )
    return spec


#: the plan's fields (train/spec.Plan) the flags set, by the flags' dests (and the
#: fields of objective_kwargs)
_PLAN_FLAGS = {
    "model": "model",
    "batch_size": "batch_size",
    "target_accuracy": "target_accuracy",
    "base_lr": "lr",
    "max_batch_size": "max_batch_size",
    "pretrained": "pretrained",
    "max_samples": "max_samples",
    "eval_every_samples": "eval_every",
    "eval_max_samples": "eval_max_samples",
    "eval_schedule": "eval_schedule",
    "seed": "seed",
    "precision": "precision",
}


def _reselector(
    args: argparse.Namespace, spec: "TrainSpec", sel: "Optional[Selection]"
) -> "Optional[Reselector]":
    """A changing cap re-selects (b, f): on the profile and r(b) from the flags, else
    those the selection was made from (None for a fixed cap)."""
    from undercap.artifacts import load_efficiency, load_profile
    from undercap.artifacts.selection import related_artifact
    from undercap.errors import UndercapError
    from undercap.train.cap import changes
    from undercap.train.session.follow import reselector_for

    if not changes(spec.cap):
        return None
    paths = {"profile": args.profile, "efficiency": args.efficiency}
    for kind in paths:
        if paths[kind] is None and sel is not None:
            paths[kind] = related_artifact(args.from_selection, sel, kind)
        if paths[kind] is None:
            raise UndercapError(f"a changing cap re-selects (b, f): pass --{kind} FILE")
    return reselector_for(
        load_profile(paths["profile"])
        .in_precision(spec.precision)
        .with_margin(args.power_margin_w),
        load_efficiency(paths["efficiency"]),
        objective=args.objective,
        energy_budget_j=args.energy_budget_j,
    )


def run(args: argparse.Namespace) -> int:
    from undercap.artifacts.selection import load_selection
    from undercap.artifacts.train_result import save_train_result
    from undercap.cli.common import open_device_from_args, print_json, training_exit_code
    from undercap.cli.train_data import data_spec
    from undercap.data.spec import load_splits
    from undercap.report.text import train_summary
    from undercap.train import train

    sel = load_selection(args.from_selection) if args.from_selection else None
    spec = _resolve(args, sel)
    args.device = _device(args, sel)
    options = run_options(args)  # a log it cannot write: refused now
    reselector = _reselector(args, spec, sel)
    with open_device_from_args(args, seed=spec.seed) as device:
        _check_freq_flag(args, device)  # before the data loads
        data = load_splits(data_spec(args, spec.model, spec.data))
        result = train(device, spec, data, options, reselector)
    if args.output is not None:
        save_train_result(args.output, result)
    if args.json:
        print_json(result.to_dict())
    else:
        print("\n".join(train_summary(result)))
        if args.output is not None:
            print(f"wrote {args.output}")
    return training_exit_code(result)


def _device(args: argparse.Namespace, sel: "Optional[Selection]") -> str:
    """--device, else the device the selection was made on (a selection made on nvml:0
    trains there again), else the default simulated board."""
    if args.device is not None:
        return args.device
    if sel is None or not sel.device:
        return defaults.DEVICE
    print(f"device: {sel.device} (the selection's; --device to train elsewhere)", file=sys.stderr)
    return sel.device


def _check_freq_flag(args: argparse.Namespace, device: Any) -> None:
    """--freq-mhz asks for a lock: on a device whose clocks are read-only here that is
    one line now, not an error after the data loaded."""
    from undercap.errors import DevicePermissionError
    from undercap.train.session.guard import can_control_clocks

    if args.freq_mhz is not None and not can_control_clocks(device):
        raise DevicePermissionError(
            f"{device.name} is read-only here: cannot lock --freq-mhz {args.freq_mhz:g}; "
            "drop --freq-mhz to train at the clocks as found, or allow clock control "
            "(jetson: run as root without --read-only; nvml: --allow-clock-control as root)"
        )


def run_options(args: argparse.Namespace) -> "RunOptions":
    """How the run is kept and shown: checkpoints, resume, sampling, logs."""
    from undercap.train.spec import RunOptions

    return RunOptions(
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every_s=args.checkpoint_every_s,
        checkpoint_every_samples=args.checkpoint_every_samples,
        resume=args.resume,
        sample_rate_hz=args.sample_rate_hz,
        progress=not args.no_progress,
        eval_log=args.eval_log,
        tensorboard_dir=args.tensorboard_dir,
        resume_hint="run it again with --resume and a higher --power-limit to go on from there",
        wait_hint="run it again with --resume (once power is back, or with a longer "
        "--max-wait-s) to go on from there",
    )
