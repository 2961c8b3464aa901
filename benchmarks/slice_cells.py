"""r(b) from a slice of the TARGET's own training split (undercap.data.slices), scored as
the proxy-sensitivity matrix scores a proxy: the shared part of benchmarks/matrix.py's
`slice` rules and benchmarks/slice_study.py.

A slice estimate of a matrix dataset: the dataset loaded as the matrix loads it
(matrix_data.data_spec, its `limit` included) with `slice_fraction` and `slice_seed`
(the slice split 80/20 into its own training and held-out parts), the matrix's model,
batch sizes, budget, evaluation cadence, pre-trained weights and 3 estimate seeds, and
the matrix's evaluation cap (a slice's held-out part smaller than it is evaluated
whole: the training loop takes min(cap, held-out)).

Every (b, seed) run goes over the WHOLE budget with dense evaluation, so that every
target rule below is computed post hoc from the same curves: each is a reference run
of undercap.estimate (target None, plateau_patience None: runs.covers then answers any
later request, for any target, from the cache) run through the estimate's own runner
(`_Runner.ensure`: the matrix's cache, harness.CACHE, one finished run per entry, so an
interrupted study resumes where it stopped). The artifact (`slice_estimate`) is what
`undercap estimate --proxy-slice` would make of those runs with the product's slice
target (the full target capped at defaults.SLICE_TARGET_FRACTION of the slice's best),
and keeps every curve.

Target rules (the slice's target accuracy; N_s(b) is the first dense grid point at or
above it, a batch size with any seed short of it is out of r(b): matrix.usable):

    full          the target's own absolute target_accuracy (matrix_data)
    plateau-x     x * the mean over seeds of the best accuracy b_max's runs reach within
                  the budget (what EstimateConfig(target_fraction=x) does)
    capped-x      min(full, x * plateau)

Cells are matrix_cells.make_cell's: Algorithm 1 (select_ours) on the slice's r(b), timed
with the target's own N(b) from the matrix's full estimate.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import harness as H  # noqa: F401  (puts this checkout's src/ first on sys.path)
import matrix_data as M

from undercap import defaults
from undercap.estimate.config import fingerprint

#: slice sizes studied (fractions of the training split, after `limit`) and the control
SIZES = (0.05, 0.10, 0.25)
CONTROL = 1.0
SLICE_SEEDS = (0, 1)
CONTROL_SEEDS = (0,)
TARGET_RULES = ("full", "plateau-0.8", "plateau-0.9", "plateau-0.95", "capped-0.95")


def pct(fraction: float) -> str:
    """0.05 -> "5", 0.1 -> "10", 1.0 -> "100"."""
    return f"{100 * fraction:.3g}"


def product_rule() -> str:
    """The product's slice target: capped-<defaults.SLICE_TARGET_FRACTION> (the device
    run's target, capped at that fraction of the slice's b_max best: EstimateConfig
    with both targets)."""
    return f"capped-{defaults.SLICE_TARGET_FRACTION:g}"


def slice_label(fraction: float, seed: int) -> str:
    return f"slice{pct(fraction)}-s{seed}"


def artifact_path(root: Path, modality: str, name: str, fraction: float, seed: int) -> Path:
    """Where a slice estimate's artifact is stored: ROOT/efficiency/<modality>-<name>-slice<pct>-s<seed>.json."""
    return Path(root) / "efficiency" / f"{modality}-{name}-{slice_label(fraction, seed)}.json"


# --- the slice estimate: whole-budget dense runs through the estimate's runner --------------
def slice_config(ds: M.Dataset, data_dir: Path, weights: str | None, fraction: float,
                 slice_seed: int, seeds: Iterable[int] = range(3)):  # type: ignore[no-untyped-def]  # fmt: skip
    """The matrix's estimate of `ds` (matrix_data.estimate_config) on a slice, dense, with
    the product's slice target (the artifact's; the study recomputes every rule)."""
    cfg = M.estimate_config(ds, data_dir, weights, seeds)
    data = dataclasses.replace(cfg.data, slice_fraction=float(fraction), slice_seed=int(slice_seed))
    return dataclasses.replace(cfg, data=data, target_accuracy=ds.target_accuracy,
                               eval_schedule="dense",
                               target_fraction=defaults.SLICE_TARGET_FRACTION)  # fmt: skip


def whole_budget_runs(cfg, cache_root: Path | None, jobs: int = 2):  # type: ignore[no-untyped-def]
    """Every (b, seed) run of `cfg` over the whole budget (reference runs, dense),
    reused from the cache where finished; -> ({(b, seed): record}, runs reused, runs made)."""
    from undercap.artifacts.cache import Cache
    from undercap.estimate import _Runner
    from undercap.report.progress import bar

    cfg.validate()
    fp = fingerprint(cfg)  # keys the slice (fraction, seed) too
    pairs = [(b, s) for b in sorted(cfg.batch_sizes, reverse=True) for s in cfg.seeds]
    runner = _Runner(cfg, Cache(cache_root), fp, False, "cpu", jobs, 1, False,
                     bar(False, desc="", unit="run"))  # fmt: skip
    try:
        records = runner.ensure(pairs, None)
    finally:
        runner.close()
    missing = [p for p in pairs if p not in records]
    if missing:
        raise RuntimeError(f"{cfg.data.label}: runs {missing} did not finish")
    return records, runner.reused, runner.ran


def slice_sizes(cfg) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The slice's training and held-out items and how many an evaluation scores."""
    from undercap.data.spec import load_splits

    s = load_splits(cfg.data, "cpu")
    cap = cfg.eval_max_samples
    return {"n_train": int(s.n_train), "n_held_out": int(s.n_test),
            "eval_items": int(s.n_test if cap is None else min(cap, s.n_test))}  # fmt: skip


def slice_estimate(ds: M.Dataset, data_dir: Path, weights: str | None, fraction: float,
                   slice_seed: int, *, cache_root: Path | None, jobs: int = 2,
                   seeds: Iterable[int] = range(3)):  # type: ignore[no-untyped-def]  # fmt: skip
    """The slice estimate of `ds` (module docstring) as an efficiency artifact: the
    product's slice target on whole-budget dense curves; extra["slice"] says which slice,
    its sizes and what this call ran."""
    from undercap.artifacts.efficiency import Efficiency
    from undercap.artifacts.provenance import provenance
    from undercap.estimate import _config_record
    from undercap.estimate.aggregate import aggregate, reference_target

    cfg = slice_config(ds, data_dir, weights, fraction, slice_seed, seeds)
    t0 = time.perf_counter()
    records, reused, ran = whole_budget_runs(cfg, cache_root, jobs)
    elapsed = time.perf_counter() - t0
    info = reference_target(cfg, records)  # the product's: capped at the full target
    work = None if cache_root is None else str(cache_root)
    eff = aggregate(cfg, records, info, work_dir=work)
    fp = fingerprint(cfg)  # keys the slice (fraction, seed) too
    extra = dict(eff.extra)
    extra["config"] = _config_record(cfg, fp, work, jobs, "cpu")
    extra["provenance"] = provenance(seeds=list(cfg.seeds), torch_device="cpu", jobs=jobs,
                                     torch_threads=1)  # fmt: skip
    extra["slice"] = {"fraction": float(fraction), "seed": int(slice_seed), "of": ds.name,
                      "modality": ds.modality, "full_target_accuracy": ds.target_accuracy,
                      "whole_budget_runs": True, "reused_runs": reused, "ran_runs": ran,
                      "elapsed_s": elapsed if ran else None, **slice_sizes(cfg), "runs": record_costs(records)}  # fmt: skip
    return Efficiency(eff.model, eff.dataset, eff.target_accuracy, eff.samples_to_target,
                      eff.relative, extra)  # fmt: skip


def load_slice_estimate(root: Path, modality: str, name: str, fraction: float, seed: int):  # type: ignore[no-untyped-def]
    """A stored slice estimate (artifact_path), or None where there is none."""
    from undercap.artifacts.efficiency import load_efficiency

    path = artifact_path(root, modality, name, fraction, seed)
    return load_efficiency(path) if path.is_file() else None


# --- post hoc: N(b) and r(b) under a target rule ---------------------------------------------
#: b -> seed -> [(samples, accuracy, ...), ...] (typing's Mapping: Python 3.8 cannot
#: subscript collections.abc's at run time)
Curves = typing.Mapping[int, typing.Mapping[int, list]]


def curves_of(eff) -> tuple[dict[int, dict[int, list[tuple[int, float]]]], int]:  # type: ignore[no-untyped-def]
    """The artifact's dense curves within the budget (aggregate keeps exactly those) as
    b -> seed -> [(samples, accuracy)], and the budget."""
    budget = int(eff.extra["config"]["max_samples"])
    out = {int(b): {int(s): [(int(p[0]), float(p[1])) for p in c if int(p[0]) <= budget]
                    for s, c in per.items()}
           for b, per in eff.extra["curves"].items()}  # fmt: skip
    return out, budget


def plateau(curves: Curves) -> float:
    """The mean over seeds of the best accuracy b_max's runs reach (curves within the budget)."""
    ref = curves[max(curves)]
    return statistics.fmean(max(a for _, a in c) for c in ref.values())


def threshold(rule: str, curves: Curves, full_target: float) -> float:
    """The slice's target accuracy under `rule` (module docstring)."""
    if rule == "full":
        return float(full_target)
    kind, _, x = rule.partition("-")
    if kind == "plateau":
        return float(x) * plateau(curves)
    if kind == "capped":
        return min(float(full_target), float(x) * plateau(curves))
    raise ValueError(f"unknown target rule {rule!r}: use one of {TARGET_RULES}")


def samples_to(curves: Curves, target: float) -> dict[int, tuple[int | None, ...]]:
    """N_s(b): per b, per seed (in seed order) the first grid point at or above `target`."""
    from undercap.estimate.runs import first_crossing

    return {b: tuple(first_crossing(list(per[s]), target) for s in sorted(per))
            for b, per in sorted(curves.items())}  # fmt: skip


def rule_runs(curves: Curves, rule: str, full_target: float) -> dict[int, list[int]]:
    """b -> per-seed N(b) under `rule`, batch sizes with a seed short of it left out
    (matrix.usable)."""
    import matrix as MX

    runs = samples_to(curves, threshold(rule, curves, full_target))
    return MX.usable(SimpleNamespace(samples_to_target=runs))


def relative(curves: Curves, rule: str, full_target: float) -> dict[int, float] | None:
    """r(b) under `rule` (matrix.relative_from: relative to the largest usable b), or
    None where no batch size is usable."""
    import matrix as MX

    runs = rule_runs(curves, rule, full_target)
    return MX.relative_from(runs)[0] if runs else None


def eff_relative(eff, rule: str, full_target: float | None = None) -> dict[int, float] | None:  # type: ignore[no-untyped-def]
    """relative() of a stored slice estimate (full target: the one it records)."""
    curves, _ = curves_of(eff)
    full = eff.extra["slice"]["full_target_accuracy"] if full_target is None else full_target
    return relative(curves, rule, full)


# --- cells ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NoCell:
    """A cell the rule cannot fill: no usable r(b) (or nothing feasible among its b)."""

    proxy: str
    target: str
    device: str
    power_limit_w: float | None
    rule: str
    why: str

    @property
    def gap_pct(self) -> float:
        """No configuration: as bad as it gets (the product would stop with an error)."""
        return math.inf

    @property
    def hit(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        """The matrix's cell columns (matrix_cells.Cell.to_dict), empty where there is no
        choice."""
        return {"proxy": self.proxy, "target": self.target, "device": self.device,
                "power_limit_w": self.power_limit_w, "rule": self.rule, "batch_size": None,
                "freq_mhz": None, "time_s": None, "fastest_batch_size": None,
                "fastest_freq_mhz": None, "fastest_time_s": None, "gap_pct": math.inf,
                "hit": False}  # fmt: skip


def target_samples(runs: Mapping[int, list[int]]) -> dict[int, float]:
    """The target's N(b) as every matrix cell takes it: the mean over its seeds."""
    return {b: statistics.fmean(n) for b, n in runs.items()}


def cells(profile, device: str, limits, rel: Mapping[int, float] | None,
          samples: Mapping[int, float], *, proxy: str, target: str, rule: str,
          choose: Callable | None = None) -> list:  # type: ignore[no-untyped-def]  # fmt: skip
    """One cell per limit: `choose(profile, rel, limit)` (default Algorithm 1, select_ours)
    timed with the target's N(b) (matrix_cells.make_cell); a NoCell where rel is None or
    nothing among its batch sizes is feasible."""
    from matrix_cells import make_cell

    from undercap.errors import UndercapError
    from undercap.select import select_ours

    choose = choose or select_ours
    out: list = []
    for lim in limits:
        if rel is None:
            out.append(NoCell(proxy, target, device, lim, rule, "no usable r(b)"))
            continue
        try:
            choice = choose(profile, rel, lim)
        except UndercapError as e:  # InfeasibleError, no common batch size
            out.append(NoCell(proxy, target, device, lim, rule, str(e).split("\n")[0]))
            continue
        out.append(make_cell(profile, choice, samples, proxy=proxy, target=target,
                             device=device, power_limit_w=lim, rule=rule))  # fmt: skip
    return out


def ensemble_choice(others: Mapping[str, Mapping[int, float]], name: str = "slice") -> Callable:
    """choose() for the ensemble with the slice as ONE MORE proxy: the median r(b) over
    the other datasets' r(b) plus the slice's (select.ensemble)."""
    from undercap.select import ensemble as E

    def choose(profile, rel, lim):  # type: ignore[no-untyped-def]
        return E.select_ensemble(profile, {**others, name: rel}, lim).choice

    return choose


# --- what an estimate costs ------------------------------------------------------------------
def record_costs(
    records: Mapping[tuple[int, int], Mapping[str, Any]],
) -> dict[str, dict[str, float]]:
    """Per run ("b/seed"): samples trained and wall time (set-up + training + evaluation)."""
    return {f"{b}/{s}": {"samples_trained": int(r["samples_trained"]), "wall_s": float(r["wall_s"]),
                         "train_wall_s": float(r["train_wall_s"]),
                         "eval_wall_s": float(r["eval_wall_s"])}
            for (b, s), r in sorted(records.items())}  # fmt: skip


def _runs_of(eff) -> dict[tuple[int, int], dict[str, float]]:  # type: ignore[no-untyped-def]
    return {tuple(int(x) for x in k.split("/")): v for k, v in eff.extra["slice"]["runs"].items()}  # type: ignore[misc]


def whole_cost(eff) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """What the study's whole-budget runs of a slice estimate cost (summed over runs)."""
    runs = _runs_of(eff).values()
    return {
        "samples": sum(r["samples_trained"] for r in runs),
        "wall_s": sum(r["wall_s"] for r in runs),
    }


def product_cost(eff, rule: str, full_target: float | None = None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """What `undercap estimate` would spend on this slice under `rule`: b_max's runs over
    the whole budget where the rule needs its plateau (plateau-x, capped-x; `full` stops
    them at the target too), every other run stopped at its N_s(b) (or the budget); the
    wall time of each run pro rata of its whole-budget run's by samples (training and
    dense evaluation both grow linearly with samples). The hopeless cut-off (fewer runs
    where a batch size cannot reach) is not modelled: an upper bound there."""
    curves, budget = curves_of(eff)
    full = eff.extra["slice"]["full_target_accuracy"] if full_target is None else full_target
    n = samples_to(curves, threshold(rule, curves, full))
    b_max, seeds = max(curves), {b: sorted(per) for b, per in curves.items()}
    samples, wall = 0, 0.0
    for (b, s), r in _runs_of(eff).items():
        ns = n[b][seeds[b].index(s)]
        stop = r["samples_trained"] if (b == b_max and rule != "full") or ns is None else ns
        stop = min(stop, r["samples_trained"])
        samples += stop
        wall += r["wall_s"] * stop / r["samples_trained"]
    return {"samples": samples, "wall_s": wall, "budget": budget}


def per_sample_wall(eff) -> dict[int, float]:  # type: ignore[no-untyped-def]
    """Per b: the mean over seeds of run wall time per sample (this machine's, this split's
    evaluation size): the control's turn the full proxy's samples into time here."""
    by: dict[int, list[float]] = {}
    for (b, _), r in _runs_of(eff).items():
        by.setdefault(b, []).append(r["wall_s"] / r["samples_trained"])
    return {b: statistics.fmean(v) for b, v in by.items()}


def full_cost(full_eff, per_sample: Mapping[int, float] | None = None) -> dict[str, float | None]:  # type: ignore[no-untyped-def]
    """A full proxy estimate's cost as the matrix stored it (its runs stop at the target;
    wall time of its machine) and, given per-b wall per sample measured here, its wall
    time on this machine."""
    cost = full_eff.extra["cost"]
    here = None
    if per_sample:
        here = sum(n * per_sample[b] for b, runs in full_eff.samples_to_target.items()
                   for n in runs if n is not None)  # fmt: skip
    return {
        "samples": int(cost["samples_trained"]),
        "wall_s": float(cost["wall_s"]),
        "wall_s_here": here,
    }
