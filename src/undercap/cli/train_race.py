"""`undercap train --from-selection S --race`: the race on the target (recipes/race.py)
before training, with the proxies and the profile the selection was made from (a
`run` folder's efficiency.json set and profile.json, or --efficiency/--profile).

Each lane is `undercap.train.train` with this command's own settings at the candidate's
(b, f) under the same cap; its checkpoint and evaluations go to
CHECKPOINT_DIR/race/b<b>/, the winner continues from its fork in
CHECKPOINT_DIR/checkpoint/, and the result counts the others' time and energy.
"""

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from undercap.cli.rules import add_race_budget_arg
from undercap.errors import UndercapError

if TYPE_CHECKING:
    from undercap.artifacts.selection import Selection
    from undercap.artifacts.train_result import TrainResult
    from undercap.train.schedule import Reselector
    from undercap.train.spec import RunOptions, TrainSpec


def add_race_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--race",
        action="store_true",
        help="with a selection made from several proxies: race the candidates they disagree "
        "on, on the target, before training (as `run --race`; needs --checkpoint-dir)",
    )
    add_race_budget_arg(p)


def raced_training(
    args: argparse.Namespace,
    device: Any,
    data: Any,
    spec: "TrainSpec",
    options: "RunOptions",
    reselector: "Optional[Reselector]",
) -> "TrainResult":
    """The race, then the winner's training (a TrainResult with the race counted);
    `spec` and `options`: the selected configuration's TrainSpec and the command's
    RunOptions (train/spec.py)."""
    from undercap.artifacts import load_profile
    from undercap.artifacts.selection import load_selection, related_artifact
    from undercap.recipes.ensemble import load_pooled
    from undercap.recipes.race import RaceAsk, race_plan, race_then_train
    from undercap.train.cap import changes

    if args.from_selection is None or args.checkpoint_dir is None:
        raise UndercapError("--race needs --from-selection and --checkpoint-dir")
    if args.race_budget >= 1:
        raise UndercapError(f"--race-budget {args.race_budget:g}: give a fraction below 1")
    sel = load_selection(args.from_selection)
    paths = {
        k: getattr(args, k) or related_artifact(args.from_selection, sel, k)
        for k in ("profile", "efficiency")
    }
    if None in paths.values():
        raise UndercapError("--race needs the selection's profile and efficiency set")
    eff = load_pooled([str(paths["efficiency"])], spec.model)
    ask = RaceAsk(True, args.race_budget, args.power_margin_w, changes(spec.cap))
    sel = _as_selected(sel, spec)
    plan, why = race_plan(ask, load_profile(paths["profile"]), eff, spec.power_limit_w, sel)
    if why:
        _log(why)
    train = _Lanes(device, data, spec, options, reselector)
    out, progress = Path(args.checkpoint_dir), not args.no_progress
    if plan is None or not plan.needed:
        return train(sel, out, progress, None)
    return race_then_train(spec.target_accuracy, sel, plan, out, progress, _log, train)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def _as_selected(sel: "Selection", spec: "TrainSpec") -> "Selection":
    """The selection at the (b, f) this command trains (flags may override it)."""
    freq = sel.freq_mhz if spec.freq_mhz is None else spec.freq_mhz  # observed: kept
    return dataclasses.replace(sel, batch_size=spec.batch_size, freq_mhz=freq)


class _Lanes:
    """recipes/race's `train`: one run at a selection's (b, f) with its checkpoint and
    evaluation log in `out` (a re-run resumes it), this command's settings otherwise."""

    def __init__(
        self,
        device: Any,
        data: Any,
        spec: "TrainSpec",
        options: "RunOptions",
        reselector: "Optional[Reselector]",
    ) -> None:
        self.device, self.data, self.spec, self.options = device, data, spec, options
        self.reselector = reselector

    def __call__(
        self, sel: "Selection", out: Path, progress: bool, time_budget_s: Optional[float]
    ) -> "TrainResult":
        from undercap.train import train

        ckpt = out / "checkpoint"
        spec = dataclasses.replace(self.spec, batch_size=sel.batch_size, freq_mhz=sel.lock_mhz())
        options = dataclasses.replace(
            self.options,
            checkpoint_dir=ckpt,
            resume=(ckpt / "checkpoint.pt").exists(),
            eval_log=out / "evals.csv",
            progress=progress,
            time_budget_s=time_budget_s,
        )
        return train(self.device, spec, self.data, options, self.reselector)
