"""`undercap run`: the method end to end in one command.

estimate (or reuse) r(b) on the proxy -> profile (or reuse) the device -> select
(Algorithm 1) -> train on the target on the device at the chosen (b, f) under the
power limit -> one results folder:

    profile.json     the (b, f) lookup table used
    efficiency.json  r(b) on the proxy used
    selection.json   the choice, every batch size's candidate and why others were out
    train.json       the training result (time to accuracy, energy, power, guard events)
    summary.md       a short human summary (also printed)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from undercap.artifacts import (
    Efficiency,
    Profile,
    load_efficiency,
    save_efficiency,
    save_json,
    save_profile,
    write_atomic,
)
from undercap.comparison import limit_label
from undercap.errors import ArtifactError, UndercapError
from undercap.provenance import provenance
from undercap.scenario import (
    Log,
    TrainingSetup,
    check_feasible,
    data_label,
    estimate_efficiency,
    stderr_log,
    with_pretrained,
)

SELECTION_SCHEMA = "undercap.selection/1"


@dataclass(frozen=True)
class RunConfig:
    device: str
    model: str
    proxy: Any  # pretrain.DataSpec (unused when `efficiency` is given)
    target: Any  # pretrain.DataSpec
    power_limit_w: float | None
    setup: TrainingSetup
    target_accuracy: float  # absolute, on the target (what device training stops at)
    proxy_accuracy: float | None = None  # proxy estimate target (default: target_accuracy)
    proxy_fraction: float | None = None  # ... or a fraction of b_max's best proxy accuracy
    estimate_seeds: tuple[int, ...] = (0, 1, 2)
    seed: int = 0  # device training seed
    efficiency: str | None = None  # reuse this efficiency artifact
    profile: str | None = None  # reuse this profile
    pretrain_source: Any = None
    pretrain_samples: int | None = None
    full_profile: bool = False  # full sweep even with a limit
    cache_dir: str | None = None
    device_options: dict[str, Any] = field(default_factory=dict)


def run_pipeline(
    cfg: RunConfig, out_dir: str | Path, *, progress: bool = True, log: Log = stderr_log
) -> dict[str, Any]:
    """Do everything and write the results folder; returns the summary fields."""
    from undercap.devices import open_device

    out = Path(out_dir)
    cache = Path(cfg.cache_dir) if cfg.cache_dir else out / "cache"
    # Device and profile first: an unknown device or an infeasible limit fails
    # before the (longer) efficiency estimate.
    with open_device(cfg.device, seed=cfg.seed, **cfg.device_options) as device:
        profile = _profile(cfg, device, cache, progress, log)
    check_feasible(profile, [cfg.power_limit_w])
    save_profile(out / "profile.json", profile)
    setup = with_pretrained(
        cfg.setup,
        cfg.pretrain_source,
        max_samples=cfg.pretrain_samples,
        cache_dir=cache,
        progress=progress,
        log=log,
    )
    eff = _efficiency(cfg, setup, cache, progress, log)
    save_efficiency(out / "efficiency.json", eff)
    selection = select(profile, eff, cfg.power_limit_w)
    save_json(out / "selection.json", selection)
    choice = selection["choice"]
    log(
        f"selected batch size {choice['batch_size']} at {choice['freq_mhz']:g} MHz "
        f"(limit {limit_label(cfg.power_limit_w)}); training on {data_label(cfg.target)}"
    )
    result = _train(cfg, setup, choice, out, progress)
    from undercap.train_result import save_train_result

    save_train_result(out / "train.json", result)
    text = summary_markdown(cfg, profile, eff, selection, result)
    write_atomic(out / "summary.md", text)
    return {"summary": text, "choice": choice, "result": result}


def _efficiency(
    cfg: RunConfig, setup: TrainingSetup, cache: Path, progress: bool, log: Log
) -> Efficiency:
    if cfg.efficiency:
        eff = load_efficiency(cfg.efficiency)
        if eff.model != cfg.model:
            raise UndercapError(
                f"efficiency {cfg.efficiency} is of {eff.model}, not {cfg.model}; "
                "estimate it for this model"
            )
        log(f"reusing r(b) from {cfg.efficiency} ({eff.dataset})")
        return eff
    acc = cfg.proxy_accuracy
    if acc is None and cfg.proxy_fraction is None:
        acc = cfg.target_accuracy
    return estimate_efficiency(
        setup,
        cfg.proxy,
        seeds=cfg.estimate_seeds,
        target_accuracy=acc,
        target_fraction=None if acc is not None else cfg.proxy_fraction,
        work_root=cache / "efficiency",
        role="proxy",
        progress=progress,
        log=log,
    )


def _profile(cfg: RunConfig, device: Any, cache: Path, progress: bool, log: Log) -> Profile:
    from undercap.experiment import reuse_or_profile

    return reuse_or_profile(
        device,
        cfg.model,
        cfg.target,
        cfg.setup.batch_sizes,
        given=cfg.profile,
        cache_dir=cache,
        efficient_for_w=None if cfg.full_profile else cfg.power_limit_w,
        progress=progress,
        log=log,
    )


def select(profile: Profile, eff: Efficiency, power_limit_w: float | None) -> dict[str, Any]:
    """Algorithm 1 plus every batch size's candidate and the reasons for exclusions."""
    from undercap.select import excluded_batch_sizes, per_batch, select_ours

    choice = select_ours(profile, eff.relative, power_limit_w)
    return {
        "schema": SELECTION_SCHEMA,
        "power_limit_w": power_limit_w,
        "model": profile.model,
        "device": profile.device.get("name"),
        "simulated": profile.simulated,
        "choice": choice.to_dict(),
        "candidates": [c.to_dict() for c in per_batch(profile, eff.relative, power_limit_w)],
        "excluded": {
            str(b): why
            for b, why in excluded_batch_sizes(profile, eff.relative, power_limit_w).items()
        },
        "efficiency_dataset": eff.dataset,
        "provenance": provenance(),
    }


def _train(
    cfg: RunConfig, setup: TrainingSetup, choice: dict[str, Any], out: Path, progress: bool
) -> Any:
    from undercap.devices import open_device
    from undercap.pretrain import load_splits

    data = load_splits(cfg.target, "cpu")
    ckpt = out / "checkpoint"
    resume = (ckpt / "checkpoint.pt").exists()  # a re-run continues (or returns) the run
    with open_device(cfg.device, seed=cfg.seed, **cfg.device_options) as device:
        try:
            return _train_on(device, cfg, setup, choice, data, ckpt, resume, progress)
        except ArtifactError as e:
            if not resume:
                raise
            raise UndercapError(
                f"cannot continue the training checkpointed in {ckpt} ({e}); use a new -o "
                f"folder or delete {ckpt}"
            ) from e


def _train_on(
    device: Any,
    cfg: RunConfig,
    setup: TrainingSetup,
    choice: dict[str, Any],
    data: Any,
    ckpt: Path,
    resume: bool,
    progress: bool,
) -> Any:
    from undercap.train import train_on_device

    return train_on_device(
        device,
        cfg.model,
        data,
        batch_size=int(choice["batch_size"]),
        target_accuracy=cfg.target_accuracy,
        freq_mhz=float(choice["freq_mhz"]),
        power_limit_w=cfg.power_limit_w,
        seed=cfg.seed,
        checkpoint_dir=ckpt,
        resume=resume,
        progress=progress,
        **setup.train_kwargs(),
    )


def summary_markdown(
    cfg: RunConfig, profile: Profile, eff: Efficiency, selection: dict[str, Any], result: Any
) -> str:
    sim = " (simulated device)" if profile.simulated else ""
    c = selection["choice"]
    clock = "virtual clock of the simulated device" if profile.simulated else "wall clock"
    tta = (
        f"{result.time_to_accuracy_s:.2f} s"
        if result.reached
        else f"not reached within {result.samples_trained} samples"
    )
    lines = [
        f"# undercap run: {cfg.model} on {cfg.device}{sim}",
        "",
        f"- power limit: {limit_label(cfg.power_limit_w)}",
        f"- r(b) from: {cfg.efficiency or data_label(cfg.proxy)} (target accuracy "
        f"{eff.target_accuracy:.3f}); "
        f"excluded batch sizes: {selection['excluded'] or 'none'}",
        f"- profile: {len(profile.rows)} configurations ({profile.mode} sweep)",
        f"- selected: batch size {c['batch_size']} at {c['freq_mhz']:g} MHz "
        f"(profiled {c['time_per_sample_s'] * 1e6:.1f} us/sample, peak "
        f"{c['peak_power_w']:.2f} W, r(b) = {c['relative_samples']:.3f})",
        f"- trained on: {data_label(cfg.target)}, seed {cfg.seed}, target accuracy "
        f"{cfg.target_accuracy:.3f}",
        f"- time to accuracy: {tta} ({clock}); {result.samples_to_target or result.samples_trained}"
        f" samples; final accuracy {result.final_accuracy:.3f}",
        f"- energy {result.energy_j:.1f} J; power peak {result.peak_power_w:.2f} W, mean "
        f"{result.mean_power_w:.2f} W; power-guard events: {len(result.guard_events)}",
    ]
    lines += [f"- warning: {w}" for w in result.warnings]
    lines += ["", "Files: profile.json, efficiency.json, selection.json, train.json, summary.md"]
    return "\n".join(lines) + "\n"
