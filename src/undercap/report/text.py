"""Text summaries the commands print: profile, estimate, selection, training. Pure
formatting of artifacts (no torch): a command calls the library, then prints one."""

from typing import Any, Dict, List, Optional

from undercap.artifacts.efficiency import Efficiency
from undercap.artifacts.profile import Profile
from undercap.artifacts.train_result import TrainResult
from undercap.report.ensemble import ensemble_lines
from undercap.report.profiling import cost_lines, margin_lines, run_cost_line, selection_margin


def _limit(power_limit_w: Optional[float]) -> str:
    return "none" if power_limit_w is None else f"{power_limit_w:g} W"


def profile_summary(profile: Profile) -> str:
    """What was profiled and what profiling cost."""
    sim = " (simulated device)" if profile.simulated else ""
    lines = [
        f"profiled {profile.model} on {profile.device['name']}{sim}: "
        f"{len(profile.rows)} configurations, {len(profile.batch_sizes)} batch sizes "
        f"x {len(profile.freqs_mhz)} frequencies ({profile.mode} sweep)"
    ]
    if profile.unfit_batch_sizes:
        lines.append(f"  did not fit in memory: batch sizes {list(profile.unfit_batch_sizes)}")
    lines += cost_lines(profile) + margin_lines(profile)  # report/profiling.py
    return "\n".join(lines)


def target_rule(t: Dict[str, Any]) -> str:
    """How an estimate's target was set (its extra["target"])."""
    if t.get("mode") not in ("fraction", "capped"):
        return "absolute"
    how = f"{t['fraction']:.2f} x {t['reference_accuracy']:.4f} (best of b={t['reference_batch_size']})"
    if t.get("mode") == "capped":  # a slice's: the device run's target, capped
        how = f"the lower of {t['given_accuracy']:.4f} and {how}"
    return how


def estimate_summary(eff: Efficiency) -> str:
    """The estimate as a table of N(b) and r(b) with seed spread, notes and cost."""
    t = eff.extra.get("target", {})
    how = target_rule(t)
    kind = "character " if t.get("accuracy_kind") == "character" else ""
    lines = [
        f"{eff.model} on {eff.dataset}: target {kind}accuracy {eff.target_accuracy:.4f} [{how}]",
        f"  {'b':>6} {'reached':>8} {'N(b) mean':>10} {'N std':>8} {'r(b)':>6} {'r min..max':>12}",
    ]
    means, stds = eff.extra["samples_to_target_mean"], eff.extra["samples_to_target_std"]
    spread, reached = eff.extra["relative_spread"], eff.extra["reached"]
    for b in eff.batch_sizes:
        k, n = reached[str(b)]
        if b in eff.relative:
            s = spread[str(b)]
            lines.append(
                f"  {b:>6} {f'{k}/{n}':>8} {means[str(b)]:>10.0f} {stds[str(b)]:>8.0f} "
                f"{eff.relative[b]:>6.2f} {s['min']:>5.2f}..{s['max']:<5.2f}"
            )
        else:
            lines.append(f"  {b:>6} {f'{k}/{n}':>8} {'-':>10} {'-':>8} {'excl.':>6}")
    lines += [f"  note: {note}" for note in eff.extra.get("notes", [])]
    c = eff.extra["cost"]
    how = f"{c.get('reused_runs', 0)} runs reused"
    if c.get("eval_wall_s") is not None and c["wall_s"] > 0:  # absent in older files
        schedule = eff.extra.get("config", {}).get("eval_schedule", "dense")
        how = f"{c['eval_wall_s'] / c['wall_s']:.0%} evaluating, {schedule} schedule; {how}"
    lines.append(
        f"  cost: {c['runs']} runs, {c['samples_trained']} samples trained, "
        f"{c['wall_s']:.1f} s of run time ({how}), {c.get('elapsed_s', 0.0):.1f} s elapsed"
    )
    return "\n".join(lines)


def _ms(t_s: float) -> str:
    return f"{t_s * 1e3:.4g} ms"


def in_precision(precision: str) -> str:
    """ " in bf16" for mixed precision; nothing for fp32 (as before precisions)."""
    return "" if precision == "fp32" else f" in {precision}"


def selection_summary(res: Dict[str, Any]) -> str:
    """`undercap select` without --json: the choice, exclusions and baselines."""
    sim = " (simulated device)" if res["simulated"] else ""
    objective = res.get("objective", "time")
    how = {"time": "Algorithm 1", "energy": "least energy", "edp": "least energy x time"}
    rule = how.get(objective, objective)
    if res.get("energy_budget_j") is not None:
        rule = f"fastest within {res['energy_budget_j']:g} J"
    if res.get("ensemble"):
        rule = "the ensemble rule over several proxies"
    t_r = res["time_per_sample_s"] * res["relative_samples"]
    lines = [
        f"{res['model']} on {res['device']}{sim}, power limit {_limit(res['power_limit_w'])}",
        f"  choice: batch size {res['batch_size']} at {res['freq_mhz']:g} MHz"
        f"{in_precision(res.get('precision', 'fp32'))} ({rule})",
        f"    time per sample {_ms(res['time_per_sample_s'])}; samples to target "
        f"{res['relative_samples']:.3g}x those of the largest batch (t*r {_ms(t_r)})",
        f"    peak power {res['peak_power_w']:.2f} W of {_limit(res['power_limit_w'])}"
        + ("" if res["headroom_w"] is None else f" ({res['headroom_w']:.2f} W headroom)"),
        *selection_margin(res),  # report/profiling.py
    ]
    if res.get("predicted_time_s") is not None:
        energy = res.get("predicted_energy_j")
        lines.append(
            f"    predicted to the target: {res['predicted_time_s']:.4g} s"
            + ("" if energy is None else f", {energy:.4g} J")
            + f" (N(b_max) = {res['samples_bmax']:.0f} samples on {res['dataset']})"
        )
    if res["excluded_batch_sizes"]:
        lines.append("  excluded batch sizes:")
        lines += [f"    {x['batch_size']}: {x['reason']}" for x in res["excluded_batch_sizes"]]
    lines += ensemble_lines(res.get("ensemble"))  # report/ensemble.py
    safe = res["safe_freq_mhz"]
    if safe is None:
        lines.append("  baselines: no safe frequency under this limit")
    else:
        lines.append(f"  baselines at the safe frequency {safe:g} MHz, {res['safe_freq_source']}")
    lines += _baseline_lines("baseline 1 (largest batch size)", res["baseline1"])
    lines += _baseline_lines(
        "baseline 2 (fastest on the proxy at that frequency)", res["baseline2"]
    )
    if res["simulated"]:
        lines.append("  note: the profile was measured on a simulated device")
    return "\n".join(lines)


def _baseline_lines(title: str, b: Dict[str, Any]) -> List[str]:
    head = f"  {title}:"
    if not b["available"]:
        return [head, f"    unavailable: {b['reason']}"]
    speedup = b["expected_speedup"]
    return [
        head,
        f"    batch size {b['batch_size']} at {b['freq_mhz']:g} MHz, time per sample "
        f"{_ms(b['time_per_sample_s'])}, peak {b['peak_power_w']:.2f} W",
        f"    {b['speedup_note']}"
        if speedup is None
        else f"    expected speed-up of the choice over it: {speedup:.2f}x (ratio of t*r)",
    ]


def train_summary(r: TrainResult) -> List[str]:
    """A short human summary of a training result, one line each."""
    clock = "virtual clock, SIMULATED device" if r.simulated else "wall clock"
    tta = (
        f"{r.time_to_accuracy_s:.2f} s"
        if r.time_to_accuracy_s is not None
        else f"not reached in {r.samples_trained} samples ({r.train_time_s:.2f} s)"
    )
    lim = "" if r.power_limit_w is None else f" (limit {r.power_limit_w:g} W)"
    freq = "unchanged" if r.freq_mhz_start is None else f"{r.freq_mhz_start:g} MHz"
    if r.freq_mhz_final is not None and r.freq_mhz_final != r.freq_mhz_start:
        freq += f" -> {r.freq_mhz_final:g} MHz"
    if r.clocks and r.clocks != "locked":
        freq += f" ({r.clocks})"
    lines = [
        f"{r.model} on {r.dataset}, batch {r.batch_size}{in_precision(r.precision)}, "
        f"{r.device.get('name', '?')} at {freq}" + (" [simulated]" if r.simulated else ""),
        f"time to {r.target_accuracy:.1%}: {tta} ({clock})",
        (f"samples: {r.samples_to_target} to target, " if r.reached else "samples: ")
        + f"{r.samples_trained} trained, {r.steps} steps; final accuracy "
        f"{r.final_accuracy:.2%}"
        + ("" if r.reached else f", best {r.best_accuracy:.2%} (target not reached)"),
        f"energy {r.energy_j:.1f} J; power peak {r.peak_power_w:.2f} W over "
        f"{r.guard_window_s:g} s windows (what the limit holds), highest single reading "
        f"{r.max_raw_power_w:.2f} W, mean {r.mean_power_w:.2f} W{lim}",
        _eval_line(r),
    ]
    for e in r.guard_events:
        what = (
            f"batch size {e['from_batch_size']} -> {e['to_batch_size']}"
            if e.get("to_batch_size") is not None
            else f"{e['from_mhz']} -> {e['to_mhz']} MHz"
        )
        lines.append(
            f"power guard at {e['t_s']:.2f} s: {e['action']} {what} "
            f"(mean {e['window_mean_w']:.2f} W)"
        )
    if r.resumed_from is not None:
        lines.append(f"resumed from a checkpoint at {r.resumed_from} samples")
    lines += [f"warning: {w}" for w in r.warnings]
    return lines


def _eval_line(r: Any) -> str:
    """Evaluation's device time beside the training's (not charged to it)."""
    host = f"{r.eval_wall_s:.1f} s host time"
    if r.eval_time_s is None:
        return f"evaluation: {host} (not charged to training)"
    share = r.eval_time_s / r.train_time_s if r.train_time_s > 0 else 0.0
    how = "modelled forward passes of the simulated device" if r.simulated else "device clock"
    ev = getattr(r, "evaluation", None) or {}
    what = ""
    if ev.get("schedule") == "sparse":  # train/loop/evalplan.py
        what = (
            f"; sparse: {ev['full_evaluations']} whole evaluations, "
            f"{ev['screened_items']} items screened, in {ev['looks']} looks"
        )
    return (
        f"evaluation: {r.eval_time_s:.3g} s ({how}), {share:.1%} of the training time, "
        f"{host}{what}; not charged to training"
    )


def _cap(cfg: Any) -> str:
    """The run's cap (train/cap.py; a schedule has rows, a live source a poll)."""
    cap = cfg.cap
    if hasattr(cap, "times_s"):
        return f"changes during training, schedule {cap.source}"
    if hasattr(cap, "poll_s"):
        return f"changes during training, read from {cap.source}"
    return _limit(cap.limit_at(0.0))


def _predicted_lines(selection: Any, result: Any) -> List[str]:
    """What the profile and r(b) predicted, beside what the run measured."""
    t, e = selection.extra.get("predicted_time_s"), selection.extra.get("predicted_energy_j")
    if t is None or not result.reached:
        return []
    objective = selection.extra.get("objective", "time")
    return [
        f"- objective: {objective}; predicted {t:.3g} s and "
        + ("-" if e is None else f"{e:.3g} J")
        + f" to the target (r(b) x N(b_max) on the proxy), measured "
        f"{result.time_to_accuracy_s:.3g} s and {result.energy_j:.3g} J"
    ]


def _segment_lines(result: Any) -> List[str]:
    """The configuration per segment of a run whose cap changed."""
    if not result.segments:
        return []
    why = (  # a fixed cap's segments: a read-only guard switched b, or a resume's new cap
        f"the cap changed ({result.schedule})"
        if result.schedule
        else "the configuration changed under the cap"
    )
    lines = [
        f"- {why}: {len(result.segments)} segments, "
        f"{result.pause_time_s:.3g} s paused for lack of power",
        "",
        "| from (s) | to (s) | cap | configuration | peak (W) | energy (J) | samples |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in result.segments:
        conf = "paused" if s["batch_size"] is None else f"{s['batch_size']} @ {s['freq_mhz']:g} MHz"
        peak = "-" if s.get("peak_power_w") is None else f"{s['peak_power_w']:.2f}"
        lines.append(
            f"| {s['start_s']:.4g} | {s['end_s']:.4g} | {_limit(s['power_limit_w'])} | {conf} "
            f"| {peak} | {s['energy_j']:.3g} | {s['samples']} |"
        )
    return lines + [""]


def run_summary(cfg: Any, profile: Profile, eff: Efficiency, selection: Any, result: Any) -> str:
    """summary.md of `undercap run` (cfg: recipes.run.RunConfig)."""
    sim = " (simulated device)" if profile.simulated else ""
    clock = "virtual clock of the simulated device" if profile.simulated else "wall clock"
    tta = (
        f"{result.time_to_accuracy_s:.2f} s"
        if result.reached
        else f"not reached within {result.samples_trained} samples"
    )
    excluded = {x["batch_size"]: x["reason"] for x in selection.extra["excluded_batch_sizes"]}
    r = selection.relative_samples
    how = target_rule(eff.extra.get("target", {}))
    rule = "" if how == "absolute" else f": {how}"  # unless the target was given as is
    lines = [
        f"# undercap run: {cfg.model} on {cfg.device}{sim}",
        "",
        f"- power limit: {_cap(cfg)}",
        f"- r(b) from: {cfg.efficiency or getattr(cfg.proxy, 'label', eff.dataset)} (target accuracy "
        f"{eff.target_accuracy:.3f}{rule}); excluded batch sizes: {excluded or 'none'}",
        f"- profile: {len(profile.rows)} configurations ({profile.mode} sweep)",
        f"- selected: batch size {selection.batch_size} at {selection.freq_mhz:g} MHz"
        f"{in_precision(selection.precision)}"
        f"{' (observed: read-only, clocks as found)' if selection.clock == 'observed' else ''} "
        f"(profiled {selection.time_per_sample_s * 1e6:.1f} us/sample, peak "
        f"{selection.peak_power_w:.2f} W, r(b) = {r:.3f})",
        f"- trained on: {cfg.target.label}, seed {cfg.seed}, target accuracy "
        f"{cfg.target_accuracy:.3f}",
        f"- time to accuracy: {tta} ({clock}); "
        f"{result.samples_to_target or result.samples_trained} samples; "
        f"final accuracy {result.final_accuracy:.3f}",
        f"- energy {result.energy_j:.1f} J; power peak {result.peak_power_w:.2f} W, mean "
        f"{result.mean_power_w:.2f} W; power-guard events: {len(result.guard_events)}",
    ]
    if not result.simulated:  # the cap holds windowed means; a real sensor's spikes are above
        lines.append(
            f"- power windows: peak is the highest {result.guard_window_s:g} s mean (what the "
            f"limit holds); highest single reading {result.max_raw_power_w:.2f} W"
        )
    if result.clocks == "read-only: clocks as found":
        lines.append("- clocks: read-only: clocks as found (never locked)")
    lines += [x for x in (run_cost_line(selection),) if x]  # report/profiling.py
    lines += _predicted_lines(selection, result)
    lines += _segment_lines(result)
    lines += ensemble_lines(selection.extra.get("ensemble"), "  ", "- ")  # report/ensemble.py
    lines += [f"- warning: {w}" for w in result.warnings]
    files = "profile.json, efficiency.json, selection.json, train.json, evals.csv, summary.md"
    lines += ["", "Files: " + files + (", schedule.png" if result.segments else "")]
    return "\n".join(lines) + "\n"


def schedule_summary(schedule: Any, compress: float) -> str:
    """What a power schedule offers: its span, caps and outages."""
    times, caps = list(schedule.times_s), list(schedule.limits_w)
    end = schedule.period_s or times[-1] + (times[-1] - times[-2] if len(times) > 1 else 0.0)
    spans = [b - a for a, b in zip(times, times[1:] + [end])]
    out = sum(s for s, c in zip(spans, caps) if c == 0)
    energy = sum(s * (c or 0.0) for s, c in zip(spans, caps))
    finite = [c for c in caps if c is not None]
    return "\n".join(
        [
            f"power schedule from {schedule.source}: {len(times)} changes over {end:.4g} s "
            f"(daylight compressed {compress:g}x)"
            + (f", repeating every {schedule.period_s:.4g} s" if schedule.period_s else ""),
            f"  cap {min(finite):.2f} .. {max(finite):.2f} W; no power for {out:.4g} s "
            f"({100 * out / end if end else 0:.0f}% of the time); {energy:.4g} J available",
        ]
    )
