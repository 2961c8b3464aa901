"""Pieces `undercap run` and `undercap compare` share: the training set-up, profiles,
pre-trained weights and efficiency estimates, all through the one cache
(artifacts.cache), each keyed by what determines it (an estimate run's:
estimate.config.run_key).
"""

import dataclasses
import functools
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from undercap import __version__, defaults
from undercap.artifacts.cache import Cache
from undercap.artifacts.profile import Profile, load_profile
from undercap.data.spec import DataSpec
from undercap.devices.base import Device
from undercap.errors import UndercapError
from undercap.models.recipe import UserCode
from undercap.models.registry import model_spec
from undercap.models.user import code_digest
from undercap.train.spec import Plan

Log = Callable[[str], None]


def stderr_log(msg: str) -> None:
    print(msg, file=sys.stderr)


# --- profiles ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelInput:
    """What profiling a model for some data needs: its per-sample input shape, the
    classes of its output layer, and the task (which inputs to feed it)."""

    shape: Tuple[int, ...]
    num_classes: int
    task: str


def model_input(model: str, data: DataSpec) -> ModelInput:
    """The input a model trains on for `data`: next-token built-ins take (context,)
    windows; a user's model or a user's dataset (`py:`) is read from the data itself
    (loaded once); otherwise the data spec's image shape or the model's default."""
    spec = model_spec(model)
    if spec.builtin and spec.is_sequence:
        return ModelInput((int(data.context),), spec.profile_classes(), "next-token")
    if not spec.builtin or data.dataset.startswith("py:"):
        splits = loaded_splits(data)
        shape = tuple(data.input_shape) if data.input_shape else splits.input_shape
        return ModelInput(shape, splits.num_classes, spec.task_for(splits.task))
    shape = tuple(data.input_shape) if data.input_shape else spec.default_input_shape
    if shape is None:
        raise UndercapError(f"{model} has no default input shape; pass --input-shape")
    return ModelInput(shape, spec.profile_classes(), spec.task_for(None))


@functools.lru_cache(maxsize=4)
def loaded_splits(data: DataSpec) -> Any:
    """load_splits, once per spec in this process (recipes and fleet nodes reuse it)."""
    from undercap.data.spec import load_splits

    return load_splits(data)


def profile_model(
    device: Device,
    model: str,
    shape: Sequence[int],
    batch_sizes: Sequence[int],
    *,
    num_classes: int,
    cache: Cache,
    host_steps: bool = True,
    efficient_for_w: Optional[float] = None,
    progress: bool = True,
    log: Log = stderr_log,
    task: Optional[str] = None,
    relative: Optional[Mapping[int, float]] = None,
    margin_w: Optional[float] = None,
    prior: Optional[Profile] = None,
    precisions: Sequence[str] = ("fp32",),
) -> Profile:
    """Profile `model` on `device` (cached): a full sweep, or the paper's efficient
    sweep for the limit `efficient_for_w` (Sec. 4.1; `relative`, `margin_w`, `prior`:
    profile.run_profile), in each of `precisions`. host_steps=False: simulated devices
    give t and P from their model alone. `task` says which inputs a user's model takes."""
    from undercap.profile import ProfileSettings, profile_precisions

    sweep = [None if relative is None else sorted(relative.items()), margin_w]
    key = _profile_key(device, model, shape, batch_sizes, num_classes, host_steps, task, sweep)
    key.update(efficient_for_w=efficient_for_w, prior=prior and [r.to_dict() for r in prior.rows])
    if tuple(precisions) != ("fp32",):  # keys of fp32 profiles cached before stay valid
        key["precisions"] = list(precisions)

    def make() -> Dict[str, Any]:
        return profile_precisions(
            precisions,
            device=device,
            model_name=model,
            input_shape=shape,
            batch_sizes=batch_sizes,
            num_classes=num_classes,
            power_limit_w=efficient_for_w,
            efficient=efficient_for_w is not None,
            settings=ProfileSettings(host_steps=host_steps),
            progress=progress,
            task=task,
            relative=relative,
            margin_w=margin_w,
            prior=prior,
        ).to_dict()

    def hit(entry: Any) -> None:
        log(f"reusing cached profile of {model} ({entry.dir})")

    return Profile.from_dict(cache.json("profile", key, make, on_hit=hit))


def _profile_key(
    device: Device,
    model: str,
    shape: Sequence[int],
    batch_sizes: Sequence[int],
    num_classes: int,
    host_steps: bool,
    task: Optional[str],
    sweep: List[Any],
) -> Dict[str, Any]:
    """What makes a cached profile this profile (besides the limit it was swept for
    and the stage-1 rows it completes, which profile_model adds)."""
    from undercap.profile import PROFILE_METHOD

    return {
        "device": device.info().to_dict(),
        "model": model,
        "input_shape": list(shape),
        "batch_sizes": sorted(batch_sizes),
        "num_classes": num_classes,
        "host_steps": host_steps,
        "task": task,
        "sweep": sweep,
        "method": PROFILE_METHOD,  # profiles measured another way are not reused
        "user_code": code_digest(model),
        "undercap_version": __version__,
    }


def reuse_or_profile(
    device: Device,
    model: str,
    target: DataSpec,
    batch_sizes: Sequence[int],
    *,
    given: Optional[str],
    log: Log,
    **kw: Any,
) -> Profile:
    """The user's profile of `model` when one is given, else measure (or reuse the
    cached) profile at the shape the model trains on for `target` (the keywords:
    profile_model's)."""
    if given:
        profile = load_profile(given)
        if profile.model != model:
            raise UndercapError(
                f"profile {given} is of {profile.model}, not {model}; profile the model"
            )
        log(f"reusing profile {given}")
        return profile
    inp = model_input(model, target)
    return profile_model(
        device,
        model,
        inp.shape,
        batch_sizes,
        num_classes=inp.num_classes,
        task=inp.task,
        log=log,
        **kw,
    )


# --- pre-training and efficiency ------------------------------------------------------------
@dataclass(frozen=True)
class _Trained:
    """What every run of a recipe needs: the model, batch sizes, budget and
    evaluation grid. A base of its own so that UserCode's fields (models/recipe.py),
    which all have defaults, can follow these: Python 3.8 dataclasses have no
    keyword-only fields."""

    model: str
    batch_sizes: Tuple[int, ...]
    max_samples: int
    eval_every_samples: int


@dataclass(frozen=True)
class TrainingSetup(UserCode, _Trained):
    """What every fine-tuning run shares, the r(b) estimates and the training on the
    device alike (`RunConfig.setup`, `CompareConfig.setup`).

    Args:
        model: Built-in model name or your factory (`path/to/file.py:build`).
        batch_sizes: Candidate batch sizes; the largest is b_max.
        max_samples: Sample budget of every training run.
        eval_every_samples: Evaluate every this many training samples.
        eval_max_samples: Evaluate on at most this many test samples; None: all.
        eval_schedule: `"sparse"` (the estimates and the device run evaluate the whole
            split near the target only: the same N(b) and time to accuracy) or
            `"dense"` (every grid point, every curve point kept).
        lr: Learning rate at b_max, sqrt-scaled for smaller batches; None: the model's.
        pretrained: Weights file (`undercap pretrain`) every run starts from.
        torch_device: Where the model trains on the host: `"auto"`, `"cpu"`, `"cuda"`.
        jobs: Parallel estimate runs (worker processes) with the local executor.
        executor: Where estimate runs go: `"local"` (worker processes) or `"ray"`.
        ray_address: With `"ray"`: the cluster to join; None: a local Ray.
        deterministic: Train on the device with deterministic torch, so that a resumed
            run equals the uninterrupted one on CUDA too (slower on CUDA).
    """

    eval_max_samples: Optional[int] = None
    eval_schedule: str = defaults.TRAIN_EVAL_SCHEDULE  # the estimates' and the device's
    lr: Optional[float] = None  # base LR at the largest batch; None: models.default_lr
    pretrained: Optional[str] = None  # weights file every run starts from
    torch_device: str = "auto"
    jobs: int = 1
    executor: str = "local"  # where estimate runs go: local pool or "ray" (estimate())
    ray_address: Optional[str] = None  # the Ray cluster to join; None: a local Ray
    deterministic: bool = False  # device training with deterministic torch (train/loop/)

    def plan(
        self,
        model: str,
        batch_size: int,
        *,
        target_accuracy: float,
        seed: int,
        data: Optional[DataSpec] = None,
    ) -> Plan:
        """How a device run of this setup trains at `batch_size`: it scales the LR and
        evaluates exactly as the estimate did (`data`: the target, for the record)."""
        return Plan(
            model=model,
            batch_size=batch_size,
            target_accuracy=target_accuracy,
            seed=seed,
            max_samples=self.max_samples,
            eval_every_samples=self.eval_every_samples,
            eval_max_samples=self.eval_max_samples,
            eval_schedule=self.eval_schedule,
            base_lr=self.lr,
            max_batch_size=max(self.batch_sizes),
            pretrained=self.pretrained,
            deterministic=self.deterministic,
            data=None if data is None else data.key(),
            **dataclasses.asdict(self.user_code),
        )


def with_pretrained(
    setup: TrainingSetup,
    source: Optional[DataSpec],
    *,
    max_samples: Optional[int],
    cache: Cache,
    progress: bool,
    log: Log = stderr_log,
) -> TrainingSetup:
    """`setup` starting from weights pre-trained on `source` (none: unchanged). The
    weights are cached per request, so re-runs and other devices reuse them."""
    if source is None:
        return setup
    if setup.pretrained:
        raise UndercapError("give either --pretrain or --pretrained, not both")
    if cache.root is None:
        raise UndercapError("pre-training inside a recipe needs a cache folder for the weights")
    from undercap.estimate.pretrain import pretrain

    key = {
        "model": setup.model,
        "source": source.key(),
        "max_samples": max_samples,
        "objective": [setup.loss, setup.metric],
        "user_code": code_digest(
            setup.model, source.dataset, setup.loss, setup.metric, *setup.recipe_paths.values()
        ),
    }
    if any(setup.recipe_paths.values()):  # only then: earlier weights keep their keys
        key["recipe"] = [setup.lr, *setup.recipe_paths.values()]
    entry = cache.entry("pretrained", key)
    assert entry is not None
    path = entry.path("weights.pt")
    if entry.sealed and path.is_file():
        log(f"reusing pre-trained weights {path}")
    else:
        res = pretrain(
            setup.model,
            source,
            path,
            max_samples=max_samples,
            torch_device=setup.torch_device,
            progress=progress,
            lr=setup.lr if any(setup.recipe_paths.values()) else None,
            code=setup.user_code,
        )
        log(
            f"pre-trained {setup.model} on {source.dataset}: accuracy {res.accuracy:.3f} "
            f"after {res.samples_trained} samples ({res.wall_s:.1f} s)"
        )
        entry.store_json({"accuracy": res.accuracy, "meta": res.meta})
    return dataclasses.replace(setup, pretrained=str(path))


def estimate_efficiency(
    setup: TrainingSetup,
    data: DataSpec,
    *,
    seeds: Sequence[int],
    target_accuracy: Optional[float],
    target_fraction: Optional[float],
    cache: Cache,
    role: str,
    progress: bool,
    log: Log = stderr_log,
) -> Any:  # artifacts.Efficiency
    """r(b) of `setup.model` on `data` (estimate.estimate); finished runs are cached,
    so re-runs reuse them."""
    from undercap.estimate import EstimateConfig, estimate

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
        eval_schedule=setup.eval_schedule,
        lr=setup.lr,
        pretrained=setup.pretrained,
        **dataclasses.asdict(setup.user_code),
    )
    log(f"estimating r(b) on the {role} {data.label}")
    try:
        return estimate(
            cfg,
            cache_dir=cache.root,
            jobs=setup.jobs,
            torch_device=setup.torch_device,
            progress=progress,
            log=log,
            executor=setup.executor,
            ray_address=setup.ray_address,
        )
    except UndercapError as e:
        raise UndercapError(f"{role} efficiency on {data.dataset}: {e}") from e
