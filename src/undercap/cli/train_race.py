"""`undercap train --from-selection S --race`: the race on the target (recipes/race.py)
before training, with the proxies and the profile the selection was made from (a
`run` folder's efficiency.json set and profile.json, or --efficiency/--profile).

Each lane is `train_on_device` with this command's own settings at the candidate's
(b, f) under the same cap; its checkpoint and evaluations go to
CHECKPOINT_DIR/race/b<b>/, the winner continues from its fork in
CHECKPOINT_DIR/checkpoint/, and the result counts the others' time and energy.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Any

from undercap.cli.rules import add_race_budget_arg
from undercap.errors import UndercapError


def add_race_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--race",
        action="store_true",
        help="with a selection made from several proxies: race the candidates they disagree "
        "on, on the target, before training (as `run --race`; needs --checkpoint-dir)",
    )
    add_race_budget_arg(p)


def raced_training(args: argparse.Namespace, device: Any, data: Any, kw: dict[str, Any]) -> Any:
    """The race, then the winner's training (a TrainResult with the race counted);
    `kw`: train_on_device's keyword arguments for the selected configuration."""
    from undercap.artifacts import load_profile
    from undercap.artifacts.selection import load_selection, related_artifact
    from undercap.recipes.ensemble import load_pooled
    from undercap.recipes.race import race_plan, race_then_train

    if args.from_selection is None or args.checkpoint_dir is None:
        raise UndercapError("--race needs --from-selection and --checkpoint-dir")
    if args.race_budget >= 1:
        raise UndercapError(f"--race-budget {args.race_budget:g}: give a fraction below 1")
    sel = load_selection(args.from_selection)
    paths = {k: getattr(args, k) or related_artifact(args.from_selection, sel, k)
             for k in ("profile", "efficiency")}  # fmt: skip
    if None in paths.values():
        raise UndercapError("--race needs the selection's profile and efficiency set")
    eff = load_pooled([str(paths["efficiency"])], kw["model"])
    cfg = types.SimpleNamespace(race=True, race_fraction=args.race_budget,
                                power_margin_w=args.power_margin_w, budget=lambda: None,
                                target_accuracy=kw["target_accuracy"])  # fmt: skip
    sel = _as_selected(sel, kw)
    plan, why = race_plan(cfg, load_profile(paths["profile"]), eff, kw["power_limit_w"], sel)
    if why:
        _log(why)
    train = _trainer(device, data, kw)
    if plan is None or not plan.needed:
        return train(cfg, None, sel, Path(args.checkpoint_dir), not args.no_progress)
    return race_then_train(cfg, None, sel, plan, Path(args.checkpoint_dir),
                           not args.no_progress, _log, train)  # fmt: skip


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def _as_selected(sel: Any, kw: dict[str, Any]) -> Any:
    """The selection at the (b, f) this command trains (flags may override it)."""
    import dataclasses

    freq = sel.freq_mhz if kw["freq_mhz"] is None else kw["freq_mhz"]  # observed: kept
    return dataclasses.replace(sel, batch_size=kw["batch_size"], freq_mhz=freq)


def _trainer(device: Any, data: Any, kw: dict[str, Any]) -> Any:
    """recipes/race's `train`: one run at a selection's (b, f) with its checkpoint and
    evaluation log in `out` (a re-run resumes it)."""
    from undercap.train import train_on_device

    def train(cfg: Any, setup: Any, sel: Any, out: Path, progress: bool, follow: Any = None) -> Any:
        ckpt = out / "checkpoint"
        return train_on_device(device, kw["model"], data, **{
            **{k: v for k, v in kw.items() if k != "model"},
            "batch_size": sel.batch_size, "freq_mhz": sel.lock_mhz(), "checkpoint_dir": ckpt,
            "resume": (ckpt / "checkpoint.pt").exists(), "eval_log": out / "evals.csv",
            "progress": progress, **(follow or {})})  # fmt: skip

    return train
