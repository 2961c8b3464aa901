"""`undercap pretrain`, `undercap estimate` and `undercap plot-efficiency`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from undercap import defaults
from undercap.cli.common import (
    DATA_HELP,
    MODEL_HELP,
    add_objective_args,
    add_precision_arg,
    add_shape_args,
    add_slice_args,
    fraction,
    int_list,
    objective_kwargs,
    positive_float,
    positive_int,
    shaped_data,
)
from undercap.cli.outputs import add_output


def seeds_arg(text: str) -> list[int]:
    """'3' -> seeds 0, 1, 2; '0,1,2' or '5,' -> exactly those seeds."""
    text = text.strip()
    if "," not in text:
        return list(range(positive_int(text)))
    try:
        seeds = [int(t) for t in text.split(",") if t.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: seeds must be integers") from e
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct seeds, e.g. 0,1,2")
    return seeds


def add_executor_args(p: Any) -> None:
    """Where the estimate's (b, seed) runs go (estimate, run, compare)."""
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: this machine, --jobs worker processes (default); ray: one Ray task "
        "per run, on a local Ray or the cluster at --ray-address (pip install 'undercap[ray]')",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --executor ray: join this cluster (HOST:PORT of its head, ray://HOST:PORT, "
        "or auto); default: start a local Ray and stop it at the end",
    )


def _add_common_args(p: argparse.ArgumentParser, *, several: bool) -> None:
    """The flags pretrain and estimate share: the data, then how the training runs."""
    several_help = " (default digits); repeat it for several proxies: one artifact holds them all"
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument(
        "--dataset",
        action="append" if several else "store",
        required=not several,
        help=DATA_HELP + (several_help if several else ""),
    )
    add_shape_args(p)
    p.add_argument(
        "--limit",
        type=positive_int,
        help="use at most this many samples of the dataset (quick runs)",
    )
    p.add_argument(
        "--split",
        choices=("paper", "official"),
        help="paper: seeded 80/20 (text 90/10); official: the format's own "
        "(default: official where the format has one)",
    )
    p.add_argument(
        "--lr",
        type=positive_float,
        help="learning rate (estimate: at the largest batch; default: the model's)",
    )
    p.add_argument("--torch-device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument(
        "--eval-max-samples",
        type=positive_int,
        help="evaluate on at most N test samples (default: the whole test split)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        help="torch threads (estimate: per job; default: the cores, split between --jobs workers; "
        "1 is fastest on a busy machine; with --executor ray: CPUs per run, default 1)",
    )
    add_objective_args(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretrain",
        help="train a model on a source dataset and save its weights",
        description="Pre-train a model; `estimate --pretrained` and device "
        "training then start from these weights.",
    )
    _add_common_args(p, several=False)
    budget = p.add_mutually_exclusive_group()
    budget.add_argument(
        "--epochs", type=positive_float, help="passes over the training split (default 5)"
    )
    budget.add_argument(
        "--max-samples", type=positive_int, help="training samples instead of epochs"
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=defaults.PRETRAIN_BATCH_SIZE,
        help=f"default {defaults.PRETRAIN_BATCH_SIZE}",
    )
    p.add_argument(
        "--eval-every", type=positive_int, help="evaluate every N samples (default: once per epoch)"
    )
    p.add_argument("--seed", type=int, default=0)
    add_output(p, "weights file to write", cmd_pretrain, files=("output",))

    e = sub.add_parser(
        "estimate",
        help="estimate r(b) = N(b)/N(b_max) on a proxy dataset",
        description="Train the same (pre-trained) model with every batch size and several seeds to "
        "the target accuracy; write the efficiency artifact. Finished runs are kept in the work "
        "dir, so an interrupted estimate resumes where it stopped.",
    )
    _add_common_args(e, several=True)
    e.add_argument(
        "--batch-sizes",
        type=int_list,
        default=list(defaults.ESTIMATE_BATCH_SIZES),
        help="e.g. 8..128 (powers of two) or 16,32,64 (default 8..128)",
    )
    e.add_argument(
        "--seeds",
        type=seeds_arg,
        default=list(range(defaults.ESTIMATE_SEEDS)),
        help="a count (3 -> seeds 0,1,2) or a list (0,1,2) (default 3)",
    )
    target = e.add_mutually_exclusive_group()
    target.add_argument(
        "--target-accuracy", type=fraction, help="absolute target test accuracy, e.g. 0.9"
    )
    target.add_argument(
        "--target-fraction",
        type=fraction,
        help="target = this fraction of the best accuracy the largest batch "
        f"reaches within the budget (default {defaults.ESTIMATE_TARGET_FRACTION})",
    )
    e.add_argument(
        "--max-samples",
        type=positive_int,
        default=defaults.ESTIMATE_MAX_SAMPLES,
        help=f"sample budget per run (default {defaults.ESTIMATE_MAX_SAMPLES})",
    )
    e.add_argument(
        "--eval-every",
        type=positive_int,
        default=defaults.ESTIMATE_EVAL_EVERY_SAMPLES,
        help=f"evaluate every N training samples; N(b) is resolved to this "
        f"(default {defaults.ESTIMATE_EVAL_EVERY_SAMPLES})",
    )
    e.add_argument(
        "--eval-schedule",
        choices=("sparse", "dense"),
        default=defaults.ESTIMATE_EVAL_SCHEDULE,
        help="sparse: look at each --eval-every point sequentially, stopping once the scored part "
        "of the held-out split rules the target out, and jump ahead far from it (same N(b) as "
        "dense, a fraction of the evaluations); dense: the whole split at every point, every curve "
        f"point kept (default {defaults.ESTIMATE_EVAL_SCHEDULE})",
    )
    e.add_argument(
        "--screen-samples",
        type=positive_int,
        help="sparse only (an error with --eval-schedule dense): a look checks its verdict every N "
        f"held-out samples (default {defaults.ESTIMATE_CHECK_SAMPLES}, or four checks on a split "
        "too small for four of those; on a GPU at least 512, its evaluation batch)",
    )
    add_slice_args(e, of="each --dataset's")
    add_precision_arg(e, auto=False)
    e.add_argument("--weight-decay", type=float, help="default 0 for Adam, 0.01 for AdamW")
    e.add_argument(
        "--pretrained",
        help="weights from `undercap pretrain` "
        "(default: a seeded random init, the same for every run)",
    )
    e.add_argument(
        "--fresh-head",
        action="store_true",
        help="re-initialise the classifier head after loading --pretrained (per seed): "
        "transfer to a new task, as an ImageNet model gets a new head for the proxy",
    )
    e.add_argument("--init-seed", type=int, default=0, help="seed of the random init")
    e.add_argument(
        "--plateau-patience",
        type=positive_int,
        help="with --target-fraction: end the largest batch's reference runs after "
        "N evaluations without a new best (default: run the whole budget)",
    )
    e.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="run (b, seed) jobs in N worker processes (default 1)",
    )
    add_executor_args(e)
    e.add_argument(
        "--work-dir", type=Path, help="where finished runs are kept (default OUTPUT.runs/)"
    )
    e.add_argument("--fresh", action="store_true", help="discard finished runs in the work dir")
    add_output(
        e, "efficiency JSON to write", cmd_estimate, files=("output",), folders=("work_dir",)
    )

    q = sub.add_parser("plot-efficiency", help="plot accuracy curves and r(b) of an estimate")
    q.add_argument("efficiency", type=Path)
    add_output(q, "image to write (.png)", cmd_plot_efficiency, files=("output",))


def _data_spec(args: argparse.Namespace, dataset: str) -> Any:
    return shaped_data(args, dataset, limit=args.limit, split=args.split, task=args.task)


def cmd_pretrain(args: argparse.Namespace) -> int:
    from undercap.estimate.pretrain import pretrain
    from undercap.models.recipe import UserCode

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    res = pretrain(
        args.model,
        _data_spec(args, args.dataset),
        args.output,
        batch_size=args.batch_size,
        lr=args.lr,
        max_samples=args.max_samples,
        epochs=args.epochs,
        eval_every_samples=args.eval_every,
        eval_max_samples=args.eval_max_samples,
        seed=args.seed,
        torch_device=args.torch_device,
        progress=not args.no_progress,
        code=UserCode(**objective_kwargs(args)),
    )
    kind = "character " if res.meta.get("accuracy_kind") == "character" else ""
    print(
        f"pre-trained {res.model} on {res.dataset}: {res.samples_trained} samples in "
        f"{res.wall_s:.1f} s; final test {kind}accuracy {res.accuracy:.4f} "
        f"(best {res.best_accuracy:.4f})"
    )
    print(f"  wrote {res.path}")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from undercap.artifacts.efficiency import EfficiencySet, save_efficiency_set
    from undercap.report.text import estimate_summary

    if args.target_accuracy is None and args.target_fraction is None:
        args.target_fraction = defaults.ESTIMATE_TARGET_FRACTION
    elif args.proxy_slice is not None and args.target_fraction is None:
        args.target_fraction = defaults.SLICE_TARGET_FRACTION  # the given target, capped
    work_dir = args.work_dir or Path(str(args.output) + ".runs")
    from undercap.estimate import executor_session

    with executor_session(args.executor, args.ray_address):  # one Ray for every proxy
        effs = [_estimate_one(args, name, work_dir) for name in args.dataset or ["digits"]]
    save_efficiency_set(args.output, EfficiencySet.of(effs))  # one: undercap.efficiency/1
    print("\n".join(estimate_summary(eff) for eff in effs))
    several = f"{len(effs)} proxies' estimates, " if len(effs) > 1 else ""
    print(f"  wrote {args.output} ({several}runs cached in {work_dir})")
    return 0


def _estimate_one(args: argparse.Namespace, dataset: str, work_dir: Path) -> Any:
    """One proxy's estimate (several share the work dir: runs are keyed by their data)."""
    from undercap.estimate import EstimateConfig, estimate

    data = _data_spec(args, dataset)
    if args.proxy_slice is not None:
        data = dataclasses.replace(
            data, slice_fraction=args.proxy_slice, slice_seed=args.proxy_slice_seed
        )
    cfg = EstimateConfig(
        model=args.model,
        data=data,
        batch_sizes=tuple(args.batch_sizes),
        seeds=tuple(args.seeds),
        target_accuracy=args.target_accuracy,
        target_fraction=args.target_fraction,
        max_samples=args.max_samples,
        eval_every_samples=args.eval_every,
        eval_max_samples=args.eval_max_samples,
        lr=args.lr,
        weight_decay=args.weight_decay,
        pretrained=args.pretrained,
        init_seed=args.init_seed,
        fresh_head=args.fresh_head,
        plateau_patience=args.plateau_patience,
        eval_schedule=args.eval_schedule,
        screen_samples=args.screen_samples,
        precision=args.precision or defaults.PRECISION,
        **objective_kwargs(args),
    )
    return estimate(
        cfg,
        cache_dir=work_dir,
        jobs=args.jobs,
        torch_device=args.torch_device,
        fresh=args.fresh,
        progress=not args.no_progress,
        threads=args.threads,
        executor=args.executor,
        ray_address=args.ray_address,
    )


def cmd_plot_efficiency(args: argparse.Namespace) -> int:
    from undercap.artifacts import load_efficiency
    from undercap.report.efficiency import plot_efficiency

    out = plot_efficiency(load_efficiency(args.efficiency), args.output)
    print(f"wrote {out}", file=sys.stderr)
    return 0
