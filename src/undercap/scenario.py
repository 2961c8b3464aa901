"""Pieces `undercap run` and `undercap compare` share: profiles (cached), the
baselines' safe frequency, pre-training and the efficiency estimates.

Caching: a profile is stored next to a key (device info, model, input shape, batch
sizes, class count, undercap version); a later call with an equal key reuses it and
anything else re-profiles. Efficiency estimates keep their finished runs in a work
dir per (role, configuration) (efficiency_runs.WorkDir), so a re-run reuses them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from undercap import __version__
from undercap.artifacts import Profile, load_json, load_profile, save_json
from undercap.devices.base import Device
from undercap.errors import ArtifactError, UndercapError

PROFILE_CACHE_SCHEMA = "undercap.profile-cache/1"
Log = Callable[[str], None]


def stderr_log(msg: str) -> None:
    print(msg, file=sys.stderr)


def short_hash(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


# --- profiles ---------------------------------------------------------------------------
def num_classes_for(model: str, default: int = 10) -> int:
    """Classes of the model's head for profiling: the text vocabulary for the
    transformer, else `default` (the head is a tiny share of the work)."""
    if model == "char-transformer":
        from undercap.datasets.text import VOCAB_SIZE

        return int(VOCAB_SIZE)
    return default


def cached_profile(
    cache_dir: Path | None, key: dict[str, Any], make: Callable[[], Profile], log: Log
) -> Profile:
    """The profile stored under `key` in `cache_dir`, or `make()` (then stored)."""
    if cache_dir is None:
        return make()
    path = cache_dir / "profiles" / f"{safe_name(key['model'])}-{short_hash(key)}.json"
    if path.exists():
        try:
            obj = load_json(path, what="cached profile")
            if obj.get("schema") == PROFILE_CACHE_SCHEMA and obj.get("key") == key:
                log(f"reusing cached profile of {key['model']} ({path})")
                return Profile.from_dict(obj["profile"], path)
        except ArtifactError:
            pass  # unreadable cache entry: profile again and overwrite it
    profile = make()
    save_json(path, {"schema": PROFILE_CACHE_SCHEMA, "key": key, "profile": profile.to_dict()})
    return profile


def profile_key(
    device: Device, model: str, shape: Sequence[int], batch_sizes: Sequence[int], classes: int
) -> dict[str, Any]:
    return {
        "device": device.info().to_dict(),
        "model": model,
        "input_shape": list(shape),
        "batch_sizes": sorted(batch_sizes),
        "num_classes": classes,
        "undercap_version": __version__,
    }


def profile_model(
    device: Device,
    model: str,
    shape: Sequence[int],
    batch_sizes: Sequence[int],
    *,
    num_classes: int,
    cache_dir: Path | None,
    host_steps: bool = True,
    efficient_for_w: float | None = None,
    progress: bool = True,
    log: Log = stderr_log,
) -> Profile:
    """Profile `model` on `device` (cached): a full sweep, or the paper's efficient
    sweep for the limit `efficient_for_w` (Sec. 4.1). host_steps=False: simulated
    devices give t and P from their model alone, without running it on the host."""
    from undercap.profile import ProfileSettings, run_profile

    key = profile_key(device, model, shape, batch_sizes, num_classes)
    key["host_steps"] = host_steps
    key["efficient_for_w"] = efficient_for_w

    def make() -> Profile:
        return run_profile(
            device,
            model,
            shape,
            batch_sizes,
            num_classes=num_classes,
            power_limit_w=efficient_for_w,
            efficient=efficient_for_w is not None,
            settings=ProfileSettings(host_steps=host_steps),
            progress=progress,
        )

    return cached_profile(cache_dir, key, make, log)


def safe_profiles(
    device: Device,
    scenario_profile: Profile,
    *,
    cache_dir: Path | None,
    given: Sequence[str | Path] = (),
    progress: bool = True,
    log: Log = stderr_log,
) -> list[Profile]:
    """Profiles of every supported model on this device, from which the baselines'
    safe frequency is derived (paper Sec. 5.1: no supported model exceeds the limit).

    Simulated devices: each model at its default input shape and the default batch
    sizes (those that fit), profiled from the device model without host compute and
    cached. Real devices: the scenario's own profile plus `given` measured profiles;
    without them the safe frequency is only safe for this model, and we say so.
    """
    from undercap.models import MODEL_NAMES, default_input_shape
    from undercap.profile import DEFAULT_BATCH_SIZES

    profiles = [scenario_profile] + [load_profile(p) for p in given]
    if device.is_simulated:
        for model in MODEL_NAMES:
            profiles.append(
                profile_model(
                    device,
                    model,
                    default_input_shape(model),
                    DEFAULT_BATCH_SIZES,
                    num_classes=num_classes_for(model),
                    cache_dir=cache_dir,
                    host_steps=False,
                    progress=progress,
                    log=log,
                )
            )
    elif not given:
        log(
            "warning: no --safe-profiles given for this real device: the baselines' safe "
            f"frequency is derived from {scenario_profile.model}'s profile only (profile "
            "the other models and pass them to match the paper's baselines)"
        )
    return profiles


def safe_frequencies(
    profiles: Iterable[Profile], limits: Iterable[float | None]
) -> dict[float | None, float]:
    """The baselines' safe frequency per power limit (select.safe_freq_mhz); no limit
    means every frequency is allowed, so the highest."""
    from undercap.select import safe_freq_mhz

    profs = list(profiles)
    return {
        lim: (
            max(f for p in profs for f in p.freqs_mhz) if lim is None else safe_freq_mhz(profs, lim)
        )
        for lim in limits
    }


def data_label(spec: Any) -> str:
    """A readable name of a pretrain.DataSpec: the spec plus any subset/split/shape."""
    extra = []
    if spec.limit is not None:
        extra.append(f"{spec.limit}-sample subset")
    if spec.seed:
        extra.append(f"split seed {spec.seed}")
    if spec.input_shape:
        extra.append("as " + "x".join(str(x) for x in spec.input_shape))
    return spec.dataset + (f" [{', '.join(extra)}]" if extra else "")


def check_feasible(profile: Profile, limits: Iterable[float | None]) -> None:
    """Fail early (before any estimate or training) on a limit no configuration of the
    profiled model meets, naming the lowest feasible power."""
    from undercap.errors import InfeasibleError
    from undercap.select import lowest_feasible_power_w

    lowest = lowest_feasible_power_w(profile)
    for lim in limits:
        if lim is not None and lim < lowest:
            raise InfeasibleError(
                f"no configuration of {profile.model} on {profile.device.get('name')} stays "
                f"under {lim:g} W: the lowest feasible power is {lowest:.2f} W; raise the "
                "power limit to at least that"
            )


# --- pre-training and efficiency ------------------------------------------------------------
@dataclass(frozen=True)
class TrainingSetup:
    """What every fine-tuning run (estimates and device training) shares."""

    model: str
    batch_sizes: tuple[int, ...]
    max_samples: int
    eval_every_samples: int
    eval_max_samples: int | None = None
    lr: float | None = None  # base LR at the largest batch; None: models.default_lr
    pretrained: str | None = None  # weights file every run starts from
    torch_device: str = "auto"
    jobs: int = 1

    def train_kwargs(self) -> dict[str, Any]:
        """The `train_on_device` arguments every device run of this setup shares,
        so device training scales the LR and evaluates exactly as estimation did."""
        return {
            "max_samples": self.max_samples,
            "eval_every_samples": self.eval_every_samples,
            "eval_max_samples": self.eval_max_samples,
            "base_lr": self.lr,
            "max_batch_size": max(self.batch_sizes),
            "pretrained": self.pretrained,
            "torch_device": self.torch_device,
        }


def with_pretrained(
    setup: TrainingSetup,
    source: Any,  # pretrain.DataSpec or None
    *,
    max_samples: int | None,
    cache_dir: Path,
    progress: bool,
    log: Log = stderr_log,
) -> TrainingSetup:
    """`setup` starting from weights pre-trained on `source` (none: unchanged). The
    weights are kept in the cache per request, so re-runs and other devices reuse them."""
    if source is None:
        return setup
    if setup.pretrained:
        raise UndercapError("give either --pretrain or --pretrained, not both")
    from undercap.pretrain import pretrain

    request = {"model": setup.model, "source": repr(source), "max_samples": max_samples}
    path = cache_dir / "pretrained" / f"{safe_name(setup.model)}-{short_hash(request)}.pt"
    meta_path = path.with_suffix(".request.json")
    reuse = False
    if path.exists() and meta_path.exists():
        try:
            reuse = load_json(meta_path).get("request") == request
        except ArtifactError:
            reuse = False
    if reuse:
        log(f"reusing pre-trained weights {path}")
    else:
        res = pretrain(
            setup.model,
            source,
            path,
            max_samples=max_samples,
            torch_device=setup.torch_device,
            progress=progress,
        )
        log(
            f"pre-trained {setup.model} on {source.dataset}: accuracy {res.accuracy:.3f} "
            f"after {res.samples_trained} samples ({res.wall_s:.1f} s)"
        )
        save_json(meta_path, {"request": request, "accuracy": res.accuracy, "meta": res.meta})
    return dataclasses.replace(setup, pretrained=str(path))


def estimate_efficiency(
    setup: TrainingSetup,
    data: Any,  # pretrain.DataSpec
    *,
    seeds: Sequence[int],
    target_accuracy: float | None,
    target_fraction: float | None,
    work_root: Path,
    role: str,
    progress: bool,
    log: Log = stderr_log,
) -> Any:  # artifacts.Efficiency
    """r(b) of `setup.model` on `data` (efficiency.estimate), with a work dir per
    configuration under `work_root` so finished runs are reused on re-runs."""
    from undercap.efficiency import EstimateConfig, estimate

    cfg = EstimateConfig(
        model=setup.model,
        data=data,
        batch_sizes=tuple(sorted(setup.batch_sizes)),
        seeds=tuple(seeds),
        target_accuracy=target_accuracy,
        target_fraction=target_fraction,
        max_samples=setup.max_samples,
        eval_every_samples=setup.eval_every_samples,
        eval_max_samples=setup.eval_max_samples,
        lr=setup.lr,
        pretrained=setup.pretrained,
    )
    key = {
        "data": repr(data),
        "b_max": max(setup.batch_sizes),
        "lr": setup.lr,
        "eval": [setup.eval_every_samples, setup.eval_max_samples],
        "pretrained": setup.pretrained,
        "model": setup.model,
    }
    work_dir = work_root / f"{role}-{safe_name(data.dataset)[:40]}-{short_hash(key)}"
    log(f"estimating r(b) on the {role} {data.dataset} (work dir {work_dir})")
    try:
        return estimate(
            cfg,
            work_dir=work_dir,
            jobs=setup.jobs,
            torch_device=setup.torch_device,
            progress=progress,
            log=log,
        )
    except UndercapError as e:
        raise UndercapError(f"{role} efficiency on {data.dataset}: {e}") from e
