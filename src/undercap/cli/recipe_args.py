"""The flags `undercap run` and `undercap compare` share: data, training and the
proxies (`--proxy` repeated: several proxies' ensemble rule, select/ensemble.py). The
cap's flags are cli/cap_args.py's, beside `train`'s."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Dict, List, Optional

from undercap import defaults
from undercap.cli.cap_args import add_margin_arg
from undercap.cli.common import (
    DATA_HELP,
    DETERMINISTIC_HELP,
    MODEL_HELP,
    add_objective_args,
    add_shape_args,
    fraction,
    int_list,
    integer,
    positive_float,
    positive_int,
    shaped_data,
)
from undercap.cli.estimate import add_executor_args, seeds_arg


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--model", required=True, help=MODEL_HELP)
    g.add_argument("--target", required=True, help="the dataset to train on: " + DATA_HELP)
    add_shape_args(g)
    types = {"proxy": (per_proxy(positive_int), per_proxy(integer))}  # one, or one a --proxy
    for role in ("proxy", "target", "pretrain"):
        limit_type, seed_type = types.get(role, (positive_int, int))
        g.add_argument(
            f"--{role}-limit",
            type=limit_type,
            help=f"use a class-balanced subset of this many {role} training samples",
        )
        g.add_argument(
            f"--{role}-split-seed",
            type=seed_type,
            default=0,
            help=f"seed of the {role} train/test split and subset (default 0)",
        )
    g.add_argument(
        "--pretrain",
        metavar="SPEC",
        help="pre-train on this dataset first; estimates and device runs start from those weights",
    )
    g.add_argument(
        "--pretrain-samples",
        type=positive_int,
        help="pre-training budget in samples (default 5 epochs)",
    )
    g.add_argument(
        "--pretrained",
        metavar="WEIGHTS",
        help="start from these weights (from `undercap pretrain`)",
    )


def add_training_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument(
        "--batch-sizes",
        type=int_list,
        default=list(defaults.RECIPE_BATCH_SIZES),
        help="candidate batch sizes, e.g. 8..256 (default) or 16,32,64",
    )
    g.add_argument(
        "--max-samples",
        type=positive_int,
        default=defaults.RECIPE_MAX_SAMPLES,
        help=f"sample budget of every training run (default {defaults.RECIPE_MAX_SAMPLES})",
    )
    g.add_argument(
        "--eval-every",
        type=positive_int,
        default=defaults.RECIPE_EVAL_EVERY_SAMPLES,
        help="evaluate every this many training samples "
        f"(default {defaults.RECIPE_EVAL_EVERY_SAMPLES})",
    )
    g.add_argument(
        "--eval-max-samples", type=positive_int, help="evaluate on at most this many test samples"
    )
    g.add_argument(
        "--eval-schedule",
        choices=("sparse", "dense"),
        default="sparse",
        help="sparse: the estimates stop each look once the scored part of the held-out split "
        "rules the target out, and the device run looks less often far from it (the same N(b) "
        "and time to accuracy, a fraction of the evaluations); dense: the whole split at every "
        "point, every curve point kept (default sparse)",
    )
    g.add_argument(
        "--lr",
        type=positive_float,
        help="learning rate at the largest batch (default: the model's)",
    )
    g.add_argument("--torch-device", default="auto", help="auto, cpu or cuda[:N]")
    g.add_argument("--deterministic", action="store_true", help=DETERMINISTIC_HELP)
    g.add_argument(
        "--estimate-seeds", type=seeds_arg, help="seeds of the r(b) estimates, e.g. 3 or 0,1,2"
    )
    g.add_argument(
        "--proxy-accuracy",
        type=fraction,
        help="target accuracy on the proxy (default: the target's)",
    )
    g.add_argument(
        "--jobs", type=positive_int, default=1, help="parallel estimate runs (default 1)"
    )
    add_executor_args(g)
    g.add_argument(
        "--cache-dir",
        type=Path,
        help="cache of profiles, estimates and runs (default OUTPUT/cache)",
    )
    add_objective_args(g)
    add_margin_arg(g)
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def per_proxy(parse: Callable[[str], int]) -> Callable[[str], List[int]]:
    """'360' (every proxy) or '300,360,400' (one per --proxy, in order)."""

    def parse_list(text: str) -> List[int]:
        items = [t for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r}: give a number, or one per --proxy")
        return [parse(t) for t in items]

    parse_list.__name__ = parse.__name__  # argparse names the type in its errors
    return parse_list


def _nth(values: Any, i: int, n: int, flag: str) -> Any:
    """The i-th proxy's value of a per-proxy option (one value: every proxy's)."""
    if not isinstance(values, list):
        return values
    if len(values) == 1:
        return values[0]
    if len(values) != n:
        from undercap.errors import UndercapError

        raise UndercapError(f"{flag} has {len(values)} values for {n} proxies; give 1 or {n}")
    return values[i]


def proxy_specs(args: argparse.Namespace, proxies: Optional[List[str]]) -> List[Any]:
    """A DataSpec per --proxy, with its own --proxy-limit and --proxy-split-seed."""
    n = len(proxies or [])
    return [
        shaped_data(
            args,
            name,
            limit=_nth(args.proxy_limit, i, n, "--proxy-limit"),
            seed=_nth(args.proxy_split_seed, i, n, "--proxy-split-seed"),
        )
        for i, name in enumerate(proxies or [])
    ]


def add_proxy_arg(p: argparse.ArgumentParser, *, required: bool) -> None:
    """--proxy, repeatable (run and compare)."""
    p.add_argument(
        "--proxy",
        action="append",
        required=required,
        help="dataset r(b) is estimated on"
        + ("" if required else " (not needed with --efficiency)")
        + "; repeat it for several proxies (then the ensemble rule: Algorithm 1 on the median "
        "r(b); --proxy-limit and --proxy-split-seed take one value or one per proxy)",
    )


def proxy_fields(
    args: argparse.Namespace, *, single: bool = False, target: Any = None
) -> Dict[str, Any]:
    """Run/CompareConfig's proxy fields: one proxy (or artifact) as before, several as
    tuples. `single`: compare's (a proxy always, no artifacts). `target`: run's, whose
    --proxy-slice is one more proxy, drawn from the target's own split (same seed and
    limit: never from its test split)."""
    specs = proxy_specs(args, args.proxy)
    if getattr(args, "proxy_slice", None) is not None:
        specs.append(
            dataclasses.replace(
                target, slice_fraction=args.proxy_slice, slice_seed=args.proxy_slice_seed
            )
        )
    several = tuple(specs) if len(specs) > 1 else ()
    if single:
        return {"proxy": specs[0], "proxies": several}
    effs = getattr(args, "efficiency", None) or []
    return {
        "proxy": specs[0] if len(specs) == 1 else None,
        "proxies": several,
        "efficiency": effs[0] if len(effs) == 1 else None,
        "efficiencies": tuple(effs) if len(effs) > 1 else (),
    }
