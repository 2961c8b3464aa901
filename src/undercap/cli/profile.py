"""`undercap profile` and `undercap plot-profile`."""

import argparse
import sys
from pathlib import Path

from undercap import defaults
from undercap.cli.cap_args import add_margin_arg
from undercap.cli.common import (
    MODEL_HELP,
    add_device_args,
    add_precision_arg,
    add_task_arg,
    float_list,
    int_list,
    open_device_from_args,
    positive_float,
    positive_int,
    shape,
)
from undercap.cli.outputs import add_output


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="measure time per sample and peak power for every (batch size, frequency)",
        description="Run a few mini-batches of the real model per configuration on the "
        "device and write the profile artifact (t(b, f), P(b, f)).",
    )
    add_device_args(p)
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument(
        "--input-shape",
        type=shape,
        help="per-sample input shape, e.g. 3x32x32 (default: the model's)",
    )
    p.add_argument(
        "--num-classes",
        type=positive_int,
        help="classes of the target task (default 10; vocabulary size for text)",
    )
    add_task_arg(p)
    p.add_argument(
        "--batch-sizes",
        type=int_list,
        help="e.g. 8..512 (powers of two) or 16,32,64 (default 8..512; "
        "batch sizes that do not fit in memory are skipped)",
    )
    p.add_argument(
        "--power-limit",
        type=positive_float,
        metavar="W",
        help="use the paper's efficient sweep for this limit (Sec. 4.1)",
    )
    p.add_argument("--full", action="store_true", help="full sweep even with --power-limit")
    p.add_argument(
        "--efficiency",
        type=Path,
        help="efficiency JSON (undercap estimate): with --power-limit, skip batch sizes that "
        "provably cannot win under its r(b) (the profile then answers for this r(b) only)",
    )
    add_margin_arg(p)
    add_precision_arg(p)
    p.add_argument(
        "--freqs-mhz",
        type=float_list,
        help="only these frequencies (snapped to the device's steps)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=defaults.PROFILE_WARMUP_STEPS,
        help=f"warm-up steps per batch size (default {defaults.PROFILE_WARMUP_STEPS}); a "
        "clock change needs none",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=defaults.PROFILE_MEASURE_STEPS,
        help="fewest measured steps per configuration; more run until the confidence "
        f"intervals of time and peak power are tight (default {defaults.PROFILE_MEASURE_STEPS})",
    )
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=defaults.PROFILE_MAX_STEPS,
        help=f"most measured steps per configuration (default {defaults.PROFILE_MAX_STEPS})",
    )
    p.add_argument("--sample-rate-hz", type=positive_float, default=defaults.PROFILE_SAMPLE_RATE_HZ)
    p.add_argument("--torch-device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    add_output(p, "profile JSON to write", cmd_profile, files=("output",))

    q = sub.add_parser(
        "plot-profile",
        help="plot time vs power for every (b, f) with the feasible region (Figure 1)",
    )
    q.add_argument("profile", type=Path)
    q.add_argument("--power-limit", type=positive_float, metavar="W")
    q.add_argument(
        "--efficiency",
        type=Path,
        help="efficiency artifact: mark the configuration undercap selects",
    )
    q.add_argument(
        "--safe-freq-mhz",
        type=positive_float,
        help="Baseline 1's safe frequency (default: derived from this profile alone; "
        "`undercap compare` derives it from every supported model)",
    )
    q.add_argument(
        "--precision",
        choices=list(defaults.PRECISIONS),
        help="plot this precision's rows (default: the profile's, fp32 where it has several)",
    )
    add_output(q, "PNG to write", cmd_plot_profile, files=("output",))


def cmd_profile(args: argparse.Namespace) -> int:
    from undercap.artifacts import load_efficiency, save_profile
    from undercap.errors import UndercapError
    from undercap.models import model_spec
    from undercap.profile import ProfileSettings, profile_precisions
    from undercap.report.text import profile_summary

    spec = model_spec(args.model)
    input_shape = args.input_shape or spec.default_input_shape
    if input_shape is None:
        raise UndercapError(f"{args.model} has no default input shape: pass --input-shape")
    settings = ProfileSettings(
        warmup_steps=args.warmup,
        measure_steps=args.steps,
        max_steps=max(args.steps, args.max_steps),
        sample_rate_hz=args.sample_rate_hz,
        seed=args.seed,
    )
    relative = None  # r(b) from --efficiency (the same model): the efficient sweep prunes with it
    if args.efficiency is not None:
        if args.power_limit is None or args.full:
            raise UndercapError("--efficiency prunes the efficient sweep: give --power-limit W")
        eff = load_efficiency(args.efficiency)
        if eff.model != args.model:
            raise UndercapError(f"{args.efficiency} is for {eff.model}, not {args.model}")
        relative = eff.relative
    with open_device_from_args(args, seed=args.seed) as device:
        precision = args.precision or "fp32"
        profile = profile_precisions(
            device.precisions() if precision == "auto" else (precision,),
            device=device,
            model_name=args.model,
            input_shape=input_shape,
            batch_sizes=args.batch_sizes,
            num_classes=args.num_classes or spec.profile_classes(args.task),
            power_limit_w=args.power_limit,
            efficient=False if args.full else None,
            freqs_mhz=args.freqs_mhz,
            settings=settings,
            torch_device=args.torch_device,
            progress=not args.no_progress,
            task=args.task,
            relative=relative,
            margin_w=args.power_margin_w,
        )
    save_profile(args.output, profile)
    print(profile_summary(profile))
    print(f"  wrote {args.output}")
    return 0


def cmd_plot_profile(args: argparse.Namespace) -> int:
    from undercap.artifacts import load_efficiency, load_profile
    from undercap.errors import UndercapError
    from undercap.report.figures import plot_profile
    from undercap.select import baseline1, safe_freq_mhz, select_ours
    from undercap.select.core import profiles_in

    (profile,) = profiles_in(load_profile(args.profile), args.precision)
    choice = baseline = None
    if args.efficiency is not None:
        if args.power_limit is None:
            raise UndercapError("--efficiency needs --power-limit W to mark a choice")
        eff = load_efficiency(args.efficiency)
        choice = select_ours(profile, eff.relative, args.power_limit)
        safe = args.safe_freq_mhz or safe_freq_mhz([profile], args.power_limit)
        baseline = baseline1(profile, args.power_limit, safe)
    out = plot_profile(
        profile, args.output, power_limit_w=args.power_limit, choice=choice, baseline=baseline
    )
    print(f"wrote {out}", file=sys.stderr)
    return 0
