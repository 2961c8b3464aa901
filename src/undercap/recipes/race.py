"""`undercap run --race`: a race on the target between the candidates several proxies
disagree on, before training (the rule: select/race.py; the lanes: train/race.py).

Off by default: replayed on the matrix's recorded curves, no budget made it better
than training the proxies' median choice straight away (benchmarks/results/matrix/
README.md, "A race on the target"; docs/guides/race.md). With --race and several
proxies, every candidate trains `--race-budget` of the favourite's predicted time
from the starting weights, through recipes.run's own training path (the same
session: its clock locked, the cap guarded, time and energy accounted), one after
another; the winner's fork continues as the training (its checkpoint), and the
others' device time and energy are added to the result (train.json's "race").
"""

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from undercap import defaults
from undercap.artifacts.efficiency import Efficiency
from undercap.artifacts.io import load_json, save_json
from undercap.artifacts.profile import Profile
from undercap.artifacts.selection import Selection
from undercap.artifacts.train_result import TrainResult
from undercap.recipes.common import Log
from undercap.select.pooling import as_set, several
from undercap.select.race import RacePlan, plan_race
from undercap.train.race import Lane, RaceRecord, decide, lane_line, lane_of, with_race

OFF = (
    "race: off (the default: on the matrix no race budget beat the proxies' median choice; "
    "--race runs one)"
)


@dataclass(frozen=True)
class RaceAsk:
    """What was asked of a race: whether to hold one (--race), each candidate's device
    time as a fraction of the favourite's predicted time (--race-budget), the safety
    margin selection used, and whether the cap changes (then there is none)."""

    on: bool
    fraction: float
    margin_w: Optional[float] = None
    cap_changes: bool = False


def race_plan(
    ask: RaceAsk, profile: Profile, eff: Efficiency, limit: Optional[float], selection: Selection
) -> Tuple[Optional[RacePlan], Optional[str]]:
    """The race `run` would hold (None: none) and the line saying why or why not (None:
    nothing to say, one proxy and no --race)."""
    if not ask.on:
        return None, OFF if several(eff) else None
    if not several(eff):
        return None, "race: skipped (one proxy: no candidates to race; give several --proxy)"
    if ask.cap_changes:
        return None, "race: skipped (the cap changes during training: the follower re-selects)"
    if eff.samples_bmax is None:
        return None, "race: skipped (the proxies give no N(b_max) to size its budget)"
    plan = plan_race(
        profile.with_margin(ask.margin_w),
        as_set(eff).relatives,
        limit,
        samples_bmax=eff.samples_bmax,
        fraction=ask.fraction,
        max_candidates=defaults.RACE_CANDIDATES,
        margin=defaults.RACE_MARGIN,
    )
    fav = plan.candidates[0]
    if (fav.batch_size, fav.freq_mhz) != (selection.batch_size, selection.freq_mhz):
        raise AssertionError("the race's favourite is the ensemble rule's choice")
    return plan, f"race: {plan.reason}" if plan.needed else f"race: skipped ({plan.reason})"


#: one device run at a selection's (b, f) in a folder (its checkpoint, its evaluation
#: log), ended after `time_budget_s` of device time where given (recipes.run._Training)
Train = Callable[[Selection, Path, bool, Optional[float]], TrainResult]


def race_then_train(
    target_accuracy: float,
    selection: Selection,
    plan: RacePlan,
    out: Path,
    progress: bool,
    log: Log,
    train: Train,
) -> TrainResult:
    """Run the race's lanes (or reuse a finished race's record), continue the winner's
    fork to the target, and count the race in the result."""
    folder = out / "race"
    record = _reuse(folder / "race.json") or _race(
        target_accuracy, selection, plan, folder, progress, log, train
    )
    w = record.winner
    log(
        f"race: winner b={w['batch_size']} at {w['freq_mhz']:g} MHz ({record.verdict['why']}); "
        f"the others cost {record.cost_s:.3g} s and {record.cost_j:.3g} J of device time, "
        "counted in the time to accuracy"
    )
    ckpt = out / "checkpoint" / "checkpoint.pt"
    if not ckpt.exists():  # the winner continues from its own fork
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(folder / f"b{w['batch_size']}" / "checkpoint" / "checkpoint.pt", ckpt)
    chosen = dataclasses.replace(selection, batch_size=w["batch_size"], freq_mhz=w["freq_mhz"])
    return with_race(train(chosen, out, progress, None), record)


def _race(
    target_accuracy: float,
    selection: Selection,
    plan: RacePlan,
    folder: Path,
    progress: bool,
    log: Log,
    train: Train,
) -> RaceRecord:
    lanes: List[Lane] = []
    for c in plan.candidates:
        lane_dir = folder / f"b{c.batch_size}"
        at = dataclasses.replace(selection, batch_size=c.batch_size, freq_mhz=c.freq_mhz)
        lane_dir.mkdir(parents=True, exist_ok=True)
        result = train(at, lane_dir, progress, plan.budget_s)
        lanes.append(lane_of(result, lane_dir / "evals.csv"))
        log(lane_line(lanes[-1]))
        if lanes[-1].reached:  # training is over: the ones after it never run
            break
    record = decide(plan, lanes, target_accuracy)
    save_json(folder / "race.json", record.to_dict())
    return record


def _reuse(path: Path) -> Optional[RaceRecord]:
    """A finished race of an earlier, interrupted run of the same folder."""
    return RaceRecord.from_dict(load_json(path, what="race record")) if path.exists() else None


def race_summary(result: TrainResult) -> str:
    """summary.md's lines about the race ('' without one)."""
    r = result.race
    if not r:
        return ""
    lanes = "; ".join(
        f"b={x['batch_size']}: {x['curve'][-1]['accuracy'] if x['curve'] else float('nan'):.3f} "
        f"after {x['train_time_s']:.3g} s"
        for x in r["lanes"]
    )
    w = r["winner"]
    return (
        f"- race on the target: {r['plan']['reason']}; {lanes}; winner b={w['batch_size']} "
        f"({r['verdict']['why']}); cost {r['cost_s']:.3g} s, {r['cost_j']:.3g} J "
        "(in the time to accuracy and energy above)\n"
    )
