"""`undercap fleet`: a fleet of power-capped devices training one model on Flower, run
as a local simulation (undercap/fleet/). Flower is imported only inside the command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from undercap.cli.common import (
    fraction,
    positive_float,
    positive_int,
    print_json,
    training_exit_code,
)
from undercap.cli.outputs import add_output


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fleet",
        help="train one model on a fleet of power-capped devices (Flower simulation)",
        description="Simulate a fleet of devices, each under its own power cap, training one "
        "model with Flower: every node profiles itself and runs Algorithm 1 under its cap, "
        "the server balances local work so the nodes finish each round together and "
        "aggregates with FedNova, until the global model reaches the target accuracy. "
        "Writes fleet.json, rounds.csv, nodes.csv, summary.md and fleet.png.",
    )
    p.add_argument("--fleet", type=Path, required=True, help="fleet file (TOML, docs/fleet.md)")
    p.add_argument("--model", default="small-cnn", help="model (default small-cnn)")
    p.add_argument("--dataset", default="digits", help="data the fleet trains on (default digits)")
    p.add_argument("--data-dir", help="where --dataset's files are")
    p.add_argument("--limit", type=positive_int, help="use at most N samples")
    p.add_argument(
        "--efficiency",
        type=Path,
        required=True,
        help="r(b) of the model (undercap estimate); its batch sizes are the ones profiled",
    )
    p.add_argument("--target-accuracy", type=fraction, required=True, metavar="ACC")
    p.add_argument(
        "--plan",
        choices=("balanced", "equal", "baseline1"),
        default="balanced",
        help="balanced: Algorithm 1 per node, work that makes nodes finish together "
        "(default); equal: Algorithm 1 per node, equal work; baseline1: largest batch at "
        "each node's safe clock, equal work",
    )
    p.add_argument(
        "--partition", default="iid", help="iid (default) or dirichlet:ALPHA (non-IID labels)"
    )
    p.add_argument(
        "--round-samples",
        type=positive_float,
        metavar="N",
        help="work per round in b_max-equivalent samples (default: the training set once)",
    )
    p.add_argument("--max-rounds", type=positive_int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=positive_float, help="local LR at the largest batch")
    p.add_argument("--local-optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (FedNova's a_i)")
    p.add_argument("--power-margin-w", type=float, metavar="W")
    p.add_argument(
        "--backend",
        choices=("ray", "inprocess"),
        default="ray",
        help="ray: Flower's simulation runtime (default); inprocess: the same apps in "
        "this process, no Ray",
    )
    p.add_argument("--cache-dir", help="node profiles cache (default OUT/cache)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    add_output(p, "results folder", cmd_fleet, folders=("output", "cache_dir"), locked=("output",))


def cmd_fleet(args: argparse.Namespace) -> int:
    from undercap.errors import require

    require("flwr", "fleet", "undercap fleet (Flower, Python >= 3.10)")
    from undercap.fleet.report import summary_text
    from undercap.fleet.simulation import run_fleet

    result = run_fleet(
        _config(args),
        args.output,
        backend=args.backend,
        progress=not args.no_progress,
        log=lambda m: print(m, file=sys.stderr),
    )
    if args.json:
        print_json(result.summary())
    else:
        print(summary_text(result), end="")
        print(f"  wrote {args.output}/fleet.json, rounds.csv, nodes.csv, summary.md")
    return training_exit_code(result)  # 3 with how close it came, like train and run


def _config(args: argparse.Namespace) -> Any:
    from undercap.artifacts.efficiency import load_efficiency
    from undercap.data.spec import DataSpec
    from undercap.errors import UndercapError
    from undercap.fleet.config import FleetConfig
    from undercap.fleet.spec import load_fleet

    eff = load_efficiency(args.efficiency)
    if eff.model != args.model:
        raise UndercapError(
            f"{args.efficiency} is r(b) of {eff.model}, not {args.model}; estimate it for "
            f"{args.model} (undercap estimate --model {args.model})"
        )
    return FleetConfig(
        fleet=load_fleet(args.fleet),
        model=args.model,
        data=DataSpec(args.dataset, data_dir=args.data_dir, limit=args.limit),
        target_accuracy=args.target_accuracy,
        relative={int(b): float(r) for b, r in eff.relative.items()},
        mode=args.plan,
        partition=args.partition,
        round_work=args.round_samples,
        max_rounds=args.max_rounds,
        seed=args.seed,
        base_lr=args.lr,
        optimizer=args.local_optimizer,
        momentum=args.momentum,
        margin_w=args.power_margin_w,
        cache_dir=args.cache_dir or str(args.output / "cache"),
        efficiency_source=str(args.efficiency),
        extra={"argv": json.dumps(sys.argv[1:])},
    ).check()
