"""Aggregate finished (b, seed) runs into the efficiency artifact (DESIGN.md).

N_s(b) is the first evaluation point at or above the target on seed s's curve; N(b)
the mean over the seeds that reached it; r(b) = N(b) / N(b_ref), b_ref the largest
batch size with a run that reached it (normally b_max); the spread of r is that of
N_s(b) / N(b_ref). A batch size no seed took to the target has no r(b) ("excluded").
"""

import dataclasses
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

from undercap._compat import fmean
from undercap.artifacts.efficiency import Efficiency
from undercap.data.slices import pct
from undercap.errors import UndercapError
from undercap.estimate.config import EstimateConfig
from undercap.estimate.runs import curve_within, first_crossing

Record = Dict[str, Any]  # one run's record (estimate.runs.run_job)


def _std(xs: List[float]) -> float:
    return statistics.stdev(xs) if len(xs) >= 2 else 0.0


def aggregate(
    cfg: EstimateConfig,
    records: Dict[Tuple[int, int], Record],
    target_info: Dict[str, Any],
    *,
    skipped: Sequence[Tuple[int, int]] = (),
    work_dir: Optional[str] = None,
) -> Efficiency:
    """N(b) per seed from each run's curve, r(b) over the batch sizes that reached.
    `skipped` (b, seed) runs were left out once another seed of b showed it could not
    reach the target (estimate._hopeless): they count as not reached."""
    target = float(target_info["accuracy"])
    bs, seeds = sorted(cfg.batch_sizes), list(cfg.seeds)
    ran = {b: [s for s in seeds if (b, s) in records] for b in bs}
    curves = {b: {s: curve_within(records[(b, s)], cfg.max_samples) for s in ran[b]} for b in bs}
    runs = {b: tuple(first_crossing(curves[b].get(s, []), target) for s in seeds) for b in bs}
    reached = {b: [float(n) for n in runs[b] if n is not None] for b in bs}
    # the best each run saw, its last (whole-split) evaluation included: a sparse run far
    # from the target may have none but that one, a step past the budget
    best = {b: [max(p[1] for p in records[(b, s)]["curve"]) for s in ran[b]] for b in bs}
    usable = [b for b in bs if reached[b]]
    if not usable:
        raise UndercapError(_none_reached(cfg, target, best, work_dir))
    b_ref = max(usable)
    n_ref = fmean(reached[b_ref])
    relative = {b: fmean(reached[b]) / n_ref for b in usable}
    relative[b_ref] = 1.0
    per_seed = {b: [n / n_ref for n in reached[b]] for b in usable}
    spread = {
        str(b): {"std": _std(rs), "min": min(rs), "max": max(rs), "n": len(rs)}
        for b, rs in per_seed.items()
    }
    excluded = [b for b in bs if not reached[b]]
    kinds = {records[k].get("accuracy_kind", "sample") for k in records}
    chosen = [records[(b, s)] for b in bs for s in ran[b]]
    extra: Dict[str, Any] = {
        "target": dict(target_info, accuracy_kind=kinds.pop() if len(kinds) == 1 else "mixed"),
        "reference_batch_size": b_ref,
        "relative_spread": spread,
        "samples_to_target_mean": {str(b): fmean(reached[b]) if reached[b] else None for b in bs},
        "samples_to_target_std": {str(b): _std(reached[b]) if reached[b] else None for b in bs},
        "reached": {str(b): [len(reached[b]), len(seeds)] for b in bs},
        "excluded": excluded,
        "best_accuracy": {str(b): best[b] for b in bs},
        "skipped": [list(k) for k in sorted(skipped)],
        "notes": _notes(cfg, reached, b_ref, excluded) + _skip_notes(skipped, cfg.max_samples),
        "curves": {
            str(b): {str(s): [list(p) for p in c] for s, c in curves[b].items()} for b in bs
        },
        "cost": _cost(chosen),
        "init": chosen[0].get("init", {}),
    }
    return Efficiency(cfg.model, cfg.data.dataset, target, runs, relative, extra)


def _cost(chosen: List[Record]) -> Dict[str, Any]:
    """What the runs that ran cost (skipped runs cost nothing)."""
    return {
        "runs": len(chosen),
        "samples_trained": sum(int(r["samples_trained"]) for r in chosen),
        **{k: sum(float(r[k]) for r in chosen) for k in ("wall_s", "train_wall_s", "eval_wall_s")},
    }


def _none_reached(
    cfg: EstimateConfig, target: float, best: Dict[int, List[float]], work_dir: Optional[str]
) -> str:
    """Why nothing can be selected, how close each batch size came and what to do."""
    closest = ", ".join(f"b={b} {max(accs):.3f}" for b, accs in best.items() if accs)
    kept = f"finished runs are kept in {work_dir}" if work_dir else "no --work-dir: nothing kept"
    return (
        f"no batch size reached the target accuracy {target:.4f} within {cfg.max_samples} "
        f"samples (best accuracy reached: {closest}); raise --max-samples or lower the "
        f"target ({kept}, and a re-run reuses them)"
    )


def _skip_notes(skipped: Sequence[Tuple[int, int]], budget: int) -> List[str]:
    by_b: Dict[int, List[int]] = {}
    for b, s in sorted(skipped):
        by_b.setdefault(b, []).append(s)
    return [
        f"b={b}: seed(s) {seeds} skipped: another seed spent the whole {budget}-sample "
        "budget and ended far below the target"
        for b, seeds in by_b.items()
    ]


def _notes(
    cfg: EstimateConfig, reached: Dict[int, List[float]], b_ref: int, excluded: List[int]
) -> List[str]:
    notes, n_seeds = [], len(cfg.seeds)
    if b_ref != cfg.b_max:
        notes.append(
            f"r(b) is relative to b={b_ref}, the largest batch size that reached the "
            f"target (b={cfg.b_max} did not)"
        )
    for b, ns in reached.items():
        k = len(ns)
        if 0 < k < n_seeds:
            notes.append(
                f"b={b}: {n_seeds - k} of {n_seeds} seeds did not reach the target; "
                f"N(b) is the mean over the {k} that did"
            )
    if excluded:
        notes.append(
            f"excluded from selection (no seed reached the target within "
            f"{cfg.max_samples} samples): {excluded}"
        )
    if cfg.pretrained is None:
        notes.append(
            f"no pre-trained weights: every run starts from the same random init "
            f"(seed {cfg.init_seed})"
        )
    return notes


def reference_target(cfg: EstimateConfig, refs: Dict[Tuple[int, int], Record]) -> Dict[str, Any]:
    """The target from b_max's reference runs: `target_fraction` of their mean best
    accuracy within the budget; with `target_accuracy` too, the lower of the two (a
    slice of the target's data may not reach the device run's target: its own is then
    a fraction of what it reaches, defaults.SLICE_TARGET_FRACTION)."""
    b_max = cfg.b_max
    best = [max(a for _, a in curve_within(refs[(b_max, s)], cfg.max_samples)) for s in cfg.seeds]
    reference = fmean(best)
    fraction = float(cfg.target_fraction)  # type: ignore[arg-type]
    info: Dict[str, Any] = {
        "mode": "fraction",
        "fraction": fraction,
        "reference_batch_size": b_max,
        "reference_accuracy": reference,
        "reference_best_per_seed": best,
        "accuracy": fraction * reference,
    }
    if cfg.target_accuracy is not None:
        capped = min(float(cfg.target_accuracy), fraction * reference)
        info.update(mode="capped", given_accuracy=float(cfg.target_accuracy), accuracy=capped)
    return info


def of_slice(cfg: EstimateConfig, eff: Efficiency, sliced: Dict[str, Any]) -> Efficiency:
    """The estimate of a slice, named and recorded as one (which slice, its sizes and
    target), once its r(b) is known to say something (_check_slice)."""
    _check_slice(cfg, eff, sliced)
    extra = dict(eff.extra, slice=dict(sliced, target=eff.extra["target"]))
    name = f"{eff.dataset} [{sliced['percent']} slice, slice seed {sliced['seed']}]"
    return dataclasses.replace(eff, dataset=name, extra=extra)


def _check_slice(cfg: EstimateConfig, eff: Efficiency, sliced: Dict[str, Any]) -> None:
    """A slice whose r(b) holds b_max alone (no other batch size reached the slice's
    target within the budget) says nothing about b: refuse it, naming what to try."""
    if len(eff.relative) > 1 or len(cfg.batch_sizes) < 2:
        return
    what = f"a {sliced['percent']} slice of {sliced['of']} ({sliced['train_items']} training items)"
    fraction = float(sliced["fraction"])
    more = (
        f"a larger slice (--proxy-slice {pct(min(1.0, 2 * fraction))} or more)"
        if fraction < 1.0
        else "a larger --max-samples"
    )
    raise UndercapError(
        f"{what}: only batch size {max(eff.relative)} reached the slice's target accuracy "
        f"{eff.target_accuracy:.4f} within {cfg.max_samples} samples, so r(b) has one point; "
        f"try {more}"
    )
