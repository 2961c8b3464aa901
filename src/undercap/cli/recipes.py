"""`undercap run` (the method end to end) and `undercap compare` (baselines vs ours
vs the oracle over power limits and seeds)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from undercap import defaults
from undercap.cli.cap_args import add_schedule_args, cap_of, fixed_cap, power_limits
from undercap.cli.common import (
    add_device_args,
    add_objective_choice,
    add_precision_arg,
    add_removed_flags,
    add_slice_args,
    fraction,
    objective_kwargs,
    shaped_data,
    training_exit_code,
)
from undercap.cli.estimate import seeds_arg
from undercap.cli.outputs import add_output
from undercap.cli.recipe_args import add_data_args, add_proxy_arg, add_training_args, proxy_fields


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "run",
        help="estimate r(b), profile, select and train under a power limit, in one go",
        description="The method end to end: estimate (or reuse) r(b) on the proxy, profile "
        "(or reuse) the device, select the batch size and frequency (Algorithm 1), train on "
        "the target on the device, and write one results folder with a summary.",
    )
    add_device_args(r)
    add_data_args(r)
    add_proxy_arg(r, required=False)
    add_slice_args(r, of="the target's own")
    r.add_argument(
        "--power-limit",
        type=fixed_cap,
        metavar="W",
        help="power limit in W, or 'none' (required unless --power-schedule/--power-source)",
    )
    add_schedule_args(r)
    add_objective_choice(r)
    r.add_argument(
        "--target-accuracy",
        type=fraction,
        required=True,
        help="train on the target until this test accuracy (e.g. 0.9)",
    )
    r.add_argument(
        "--proxy-fraction",
        type=fraction,
        help="proxy target as a fraction of the largest batch's best accuracy",
    )
    r.add_argument(
        "--efficiency",
        action="append",
        help="reuse this efficiency artifact; repeat it (or give an efficiency set) for "
        "several proxies",
    )
    r.add_argument("--profile", help="reuse this profile")
    r.add_argument(
        "--full-profile",
        action="store_true",
        help="full sweep instead of the efficient one for the limit (Sec. 4.1)",
    )
    r.add_argument("--seed", type=int, default=0, help="seed of the device training run")
    add_precision_arg(r)
    add_removed_flags(r)
    add_training_args(r)
    add_output(r, "results folder", cmd_run, folders=("output", "cache_dir"), locked=("output",))

    c = sub.add_parser(
        "compare",
        help="baseline 1, baseline 2, ours and the oracle over power limits and seeds",
        description="For each power limit: every method's (batch size, frequency), trained "
        "on the target on the device for every seed; writes comparison.{json,md}, runs.csv, "
        "summary.csv and time/energy bar charts (paper Tables 2-4).",
    )
    add_device_args(c)
    add_data_args(c)
    add_proxy_arg(c, required=True)
    c.add_argument(
        "--power-limits",
        type=power_limits,
        required=True,
        metavar="W,W,none",
        help="power limits in W; 'none' = no limit (e.g. 3.5,3.8,none)",
    )
    c.add_argument(
        "--seeds",
        type=seeds_arg,
        default=[0, 1, 2],
        help="device training seeds: a count (3) or a list (0,1,2)",
    )
    tgt = c.add_mutually_exclusive_group(required=True)
    tgt.add_argument(
        "--target-accuracy", type=fraction, help="absolute target accuracy on the target (e.g. 0.9)"
    )
    tgt.add_argument(
        "--target-fraction",
        type=fraction,
        help="target = this fraction of the largest batch's best accuracy (on each dataset)",
    )
    c.add_argument("--profile", help="reuse this profile of the model")
    c.add_argument(
        "--safe-profiles",
        default="",
        help="real devices: comma-separated profiles of the other supported "
        "models, for the baselines' safe frequency",
    )
    add_precision_arg(c)
    c.add_argument(
        "--baseline-precision",
        choices=list(defaults.PRECISIONS),
        default=defaults.PRECISION,
        help="the baselines' arithmetic (default fp32, as the paper's)",
    )
    add_training_args(c)
    add_output(
        c, "results folder", cmd_compare, folders=("output", "cache_dir"), locked=("output",)
    )


def _spec(args: argparse.Namespace, role: str, dataset: str) -> Any:
    limit, seed = getattr(args, f"{role}_limit"), getattr(args, f"{role}_split_seed")
    return shaped_data(args, dataset, limit=limit, seed=seed, task=args.task)


def _check_common(args: argparse.Namespace) -> None:
    from undercap.data import parse_spec
    from undercap.errors import UndercapError
    from undercap.models import model_spec

    model_spec(args.model)  # an unknown model fails here, before any work
    for name in ("target", "proxy", "pretrain"):
        spec = getattr(args, name, None)
        for one in spec if isinstance(spec, list) else [spec] if spec is not None else []:
            parse_spec(one)  # a bad spec fails here, before any work
    if args.pretrain and args.pretrained:
        raise UndercapError("give either --pretrain or --pretrained, not both")
    if args.pretrained and not Path(args.pretrained).is_file():
        raise UndercapError(f"weights file {args.pretrained} does not exist")
    if len(set(args.batch_sizes)) < 1 or args.max_samples < max(args.batch_sizes):
        raise UndercapError(
            f"--max-samples {args.max_samples} is below the largest batch size "
            f"{max(args.batch_sizes)}"
        )


def _setup(args: argparse.Namespace) -> Any:
    from undercap.recipes.common import TrainingSetup

    if args.deterministic:  # cuBLAS reads it once: before the estimates use the GPU
        from undercap.train.loop.repro import set_cublas_workspace

        set_cublas_workspace()
    return TrainingSetup(
        model=args.model,
        batch_sizes=tuple(sorted(set(args.batch_sizes))),
        max_samples=args.max_samples,
        eval_every_samples=args.eval_every,
        eval_max_samples=args.eval_max_samples,
        eval_schedule=args.eval_schedule,
        lr=args.lr,
        pretrained=args.pretrained,
        torch_device=args.torch_device,
        deterministic=args.deterministic,
        jobs=args.jobs,
        executor=args.executor,
        ray_address=args.ray_address,
        **objective_kwargs(args),
    )


def _device_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.device.startswith("sim:"):
        return {"read_only": args.read_only} if args.read_only else {}
    options = {
        "sysfs_root": args.sysfs_root,
        "read_only": args.read_only,
        "allow_clock_control": args.allow_clock_control,
    }
    return {**options, "helper": args.helper} if args.helper else options


def _shared(args: argparse.Namespace) -> dict[str, Any]:
    """The fields RunConfig and CompareConfig take alike, from the flags."""
    return {
        "device": args.device,
        "model": args.model,
        "target": _spec(args, "target", args.target),
        "setup": _setup(args),
        "proxy_accuracy": args.proxy_accuracy,
        "pretrain_source": _spec(args, "pretrain", args.pretrain) if args.pretrain else None,
        "pretrain_samples": args.pretrain_samples,
        "profile": args.profile,
        "cache_dir": str(args.cache_dir) if args.cache_dir else None,
        "device_options": _device_options(args),
        "power_margin_w": args.power_margin_w,
        "precision": args.precision or defaults.PRECISION,
    }


def cmd_run(args: argparse.Namespace) -> int:
    from undercap.errors import UndercapError
    from undercap.recipes.run import RunConfig, run

    _check_common(args)
    if args.proxy is None and args.efficiency is None and args.proxy_slice is None:
        raise UndercapError(
            "give --proxy SPEC or --proxy-slice PCT (to estimate r(b)), or --efficiency FILE"
        )
    if args.proxy_slice is not None and args.efficiency is not None:
        raise UndercapError("--proxy-slice estimates r(b), --efficiency reuses it: give one")
    if args.power_limit is None and not (args.power_schedule or args.power_source):
        raise UndercapError("give --power-limit W (or none), or --power-schedule/--power-source")
    shared = _shared(args)
    cfg = RunConfig(
        **shared,
        **proxy_fields(args, target=shared["target"]),
        cap=cap_of(args),  # one value (train/cap.py), from the one of three flags given
        target_accuracy=args.target_accuracy,
        proxy_fraction=args.proxy_fraction,
        objective=args.objective,
        energy_budget_j=args.energy_budget_j,
        estimate_seeds=tuple(args.estimate_seeds or (0, 1, 2)),
        seed=args.seed,
        full_profile=args.full_profile,
    )
    out = run(cfg, args.output, progress=not args.no_progress)
    sys.stdout.write(out.summary)
    print(f"wrote {args.output}/")
    return training_exit_code(out.result)


def cmd_compare(args: argparse.Namespace) -> int:
    from undercap.recipes.compare import CompareConfig, run_comparison
    from undercap.report.compare import markdown_report

    _check_common(args)
    cfg = CompareConfig(
        **_shared(args),
        **proxy_fields(args, single=True),
        power_limits_w=tuple(args.power_limits),
        seeds=tuple(args.seeds),
        target_accuracy=args.target_accuracy,
        target_fraction=args.target_fraction,
        estimate_seeds=tuple(args.estimate_seeds) if args.estimate_seeds else None,
        safe_profiles=tuple(p for p in args.safe_profiles.split(",") if p.strip()),
        baseline_precision=args.baseline_precision,
    )
    comparison = run_comparison(cfg, args.output, progress=not args.no_progress)
    sys.stdout.write(markdown_report(comparison))
    print(
        f"\nwrote {args.output}/ (comparison.json, comparison.md, runs.csv, summary.csv, "
        "time_to_accuracy.png, energy.png, profile_<limit>W.png)"
    )
    return 0
