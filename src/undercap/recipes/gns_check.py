"""`undercap run`'s on-device cross-check of the proxy's r(b) (beyond the paper).

Before training, the gradient noise scale B_simple of the starting weights is
measured on the TARGET data on the device (estimate/gns.py: a few probe steps at
B_small = the smallest candidate batch size and B_big = k x B_small, each
forward-backward pass charged to the device, at the highest clock the profile
allows B_small under the limit). The same probe runs on the proxy data on the host
(the server side, where r(b) was estimated; no device time). The result is shown
beside the proxy's r(b): r_gns(b) of the target, the batch sizes where the two
disagree beyond their spreads, and what each rule would choose
(select/robust.py). `--rule` decides which choice is trained; the paper's rule is
the default, so by default the check reports and changes nothing.

Budget: the probe may take at most `budget_fraction` (default 1%) of the training
time the profile and r(b) predict for the paper's choice; it runs the most probe
steps (up to defaults.GNS_MAX_STEPS) that fit, and is skipped, saying why, when
not even defaults.GNS_MIN_STEPS fit (a training too short to check cheaply).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from undercap import defaults
from undercap.artifacts.cache import Cache
from undercap.artifacts.efficiency import Efficiency
from undercap.artifacts.profile import Profile
from undercap.data.spec import DataSpec
from undercap.errors import UndercapError

RULES = ("paper", "spread", "gns")


@dataclass(frozen=True)
class GnsAsk:
    """What the cross-check needs of a run: the rule that picks the trained choice, the
    probe switch and budget (a fraction of the predicted training time), the objective
    and safety margin selection uses, where the target trains (the device by name,
    opened for the probe) and the proxy (None: known only by its r(b)), and how every
    run starts (the seed, the weights, the user's loss and metric)."""

    rule: str
    on: bool
    budget_fraction: float
    objective: str
    margin_w: Optional[float]
    device: str
    device_options: Mapping[str, Any]
    model: str
    target: DataSpec
    proxy: Optional[DataSpec]
    seed: int
    pretrained: Optional[str]
    loss: Optional[str] = None
    metric: Optional[str] = None


@dataclass(frozen=True)
class GnsCheck:
    """What the cross-check measured and decided (JSON: selection extra "gns_check")."""

    rule: str  # the rule that made the trained choice
    skipped: Optional[str] = None  # why no probe ran (then only `rule`'s choice is known)
    b_small: Optional[int] = None
    b_big: Optional[int] = None
    steps: int = 0
    target: Optional[dict[str, Any]] = None  # NoiseScale.to_dict() on the target (device)
    proxy: Optional[dict[str, Any]] = None  # ... on the proxy (host), if the proxy is known
    relative_proxy: dict[str, float] = field(default_factory=dict)
    relative_gns: dict[str, float] = field(default_factory=dict)  # the target's r_gns(b)
    disagree: list[int] = field(default_factory=list)  # beyond both spreads
    corrected: dict[str, float] = field(default_factory=dict)  # r(b) the gns rule ranks with
    why: str = ""
    choices: dict[str, list[float]] = field(default_factory=dict)  # rule -> [b, f]
    probe_time_s: float = 0.0  # device time of the probe (virtual clock on a simulated device)
    predicted_train_time_s: Optional[float] = None  # of the paper's choice
    budget_fraction: float = defaults.GNS_BUDGET_FRACTION

    @property
    def trained(self) -> list[float]:
        """[b, f] trained: the rule's choice; the paper's when the rule had no probe."""
        return self.choices.get(self.rule) or self.choices["paper"]

    @property
    def changed(self) -> bool:
        """Whether the trained choice differs from the paper's rule's."""
        return self.trained != self.choices["paper"]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "trained": self.trained, "changed": self.changed}


def _b_small(profile: Profile, eff: Efficiency, limit: Optional[float]) -> Optional[Any]:
    """The probe's configuration: the smallest candidate batch size at its highest
    feasible clock (select.per_batch)."""
    from undercap.select import per_batch

    cands = per_batch(profile, eff.relative, limit)
    return min(cands, key=lambda c: c.batch_size) if cands else None


def plan(
    profile: Profile, eff: Efficiency, limit: Optional[float], n_train: int, budget: float
) -> tuple[Optional[Any], int, Optional[float], Optional[str]]:
    """(probe configuration, steps, predicted training time, why skipped)."""
    from undercap.select import select_ours

    row = _b_small(profile, eff, limit)
    if row is None:
        return None, 0, None, "no feasible batch size to probe with"
    k = defaults.GNS_PROBE_K
    n_max = eff.samples_bmax
    paper = select_ours(profile, eff.relative, limit)
    predicted = None if n_max is None else paper.time_per_sample_s * paper.relative_samples * n_max
    step_s = row.time_per_sample_s * row.batch_size * k
    fit = defaults.GNS_MAX_STEPS if predicted is None else math.floor(budget * predicted / step_s)
    steps = min(defaults.GNS_MAX_STEPS, fit, n_train // (k * row.batch_size))
    if steps < defaults.GNS_MIN_STEPS:
        why = (
            f"the smallest probe ({defaults.GNS_MIN_STEPS} steps of {k} x {row.batch_size} "
            f"samples, {defaults.GNS_MIN_STEPS * step_s:.3g} s) exceeds {budget:.0%} of the "
            f"predicted {predicted:.3g} s of training"
            if predicted is not None and fit < defaults.GNS_MIN_STEPS
            else f"the target has too few training samples ({n_train}) for the probe"
        )
        return row, 0, predicted, why
    return row, steps, predicted, None


def _probe_target(ask: GnsAsk, row: Any, steps: int) -> tuple[Any, float]:
    """B_simple on the target on the device; every pass charged to its clock."""
    from undercap.data.spec import load_splits
    from undercap.devices import open_device
    from undercap.devices.base import locked
    from undercap.estimate.gns import probe_noise_scale
    from undercap.models.weights import initial_model
    from undercap.models.workload import workload_of

    data = load_splits(ask.target, "cpu")
    model, _ = initial_model(ask.model, data, init_seed=ask.seed, pretrained=ask.pretrained)
    workload = workload_of(model, ask.model, data.input_shape, data.task)
    device_opts = dict(ask.device_options)
    with open_device(ask.device, seed=ask.seed, **device_opts) as device, locked(
        device, row.freq_mhz
    ):
        t0 = device.now_s()
        ns = probe_noise_scale(
            model,
            data,
            b_small=row.batch_size,
            b_big=defaults.GNS_PROBE_K * row.batch_size,
            steps=steps,
            seed=ask.seed,
            loss=ask.loss,
            metric=ask.metric,
            torch_device="cpu",
            on_pass=lambda b: device.account_step(workload, b),
        )
        device.synchronize()
        return ns, device.now_s() - t0


def _probe_proxy(ask: GnsAsk, b_small: int, steps: int, cache: Cache) -> Optional[Any]:
    """The same probe on the proxy data, on the host (cached); None without a proxy."""
    proxy = ask.proxy
    if proxy is None:
        return None
    from undercap.artifacts.io import file_sha256
    from undercap.data.spec import load_splits
    from undercap.estimate.gns import NoiseScale, probe_noise_scale
    from undercap.models.weights import initial_model

    key = {
        "model": ask.model,
        "data": proxy.key(),
        "b_small": b_small,
        "k": defaults.GNS_PROBE_K,
        "steps": steps,
        "weights": file_sha256(ask.pretrained) if ask.pretrained else None,
        "seed": ask.seed,
        "objective": [ask.loss, ask.metric],
    }

    def make() -> dict[str, Any]:
        data = load_splits(proxy, "cpu")
        steps_here = min(steps, data.n_train // (defaults.GNS_PROBE_K * b_small))
        if steps_here < defaults.GNS_MIN_STEPS:
            raise UndercapError(f"the proxy has too few samples for {steps} probe steps")
        model, _ = initial_model(ask.model, data, init_seed=ask.seed, pretrained=ask.pretrained)
        return probe_noise_scale(
            model,
            data,
            b_small=b_small,
            b_big=defaults.GNS_PROBE_K * b_small,
            steps=steps_here,
            seed=ask.seed,
            loss=ask.loss,
            metric=ask.metric,
        ).to_dict()

    return NoiseScale.from_dict(cache.json("gns-probe", key, make))


def cross_check(
    ask: GnsAsk, profile: Profile, eff: Efficiency, limit: Optional[float], cache: Cache
) -> GnsCheck:
    """Probe (within the budget), compare with the proxy's r(b), and every rule's choice."""
    from undercap.data.spec import load_splits

    rule, budget = ask.rule, ask.budget_fraction
    if rule not in RULES:
        raise UndercapError(f"--rule {rule!r}: choose one of {', '.join(RULES)}")
    if rule != "paper" and ask.objective != "time":
        raise UndercapError(f"--rule {rule} ranks time to accuracy; use it with --objective time")
    profile = profile.with_margin(ask.margin_w)  # as selection does
    n_train = load_splits(ask.target, "cpu").n_train
    row, steps, predicted, skipped = plan(profile, eff, limit, n_train, budget)
    if not ask.on:
        skipped = "off (--no-gns-check)"
    choices = decide(profile, eff, limit, None, None)
    base = {"rule": rule, "predicted_train_time_s": predicted, "budget_fraction": budget}
    if skipped is not None:
        return GnsCheck(skipped=skipped, choices=choices, **base)
    target, probe_s = _probe_target(ask, row, steps)
    proxy = _probe_proxy(ask, row.batch_size, steps, cache)
    choices = decide(profile, eff, limit, target, proxy)
    return GnsCheck(
        b_small=row.batch_size,
        b_big=target.b_big,
        steps=steps,
        target=target.to_dict(),
        proxy=None if proxy is None else proxy.to_dict(),
        probe_time_s=probe_s,
        choices=choices,
        **_comparison(eff, target, proxy),
        **base,
    )


def _spread(eff: Efficiency) -> dict[int, Any]:
    return {int(b): s for b, s in (eff.extra.get("relative_spread") or {}).items()}


def gns_relative(eff: Efficiency, target: Any, proxy: Any) -> tuple[dict[int, float], str]:
    """The r(b) the gns rule ranks with: the proxy's r(b) rescaled by the target's to
    the proxy's noise scale when both were measured (select.robust's transfer rule),
    else the target's r_gns where it disagrees with r(b) (its target rule)."""
    from undercap.select import robust as R

    t = (target.b_simple, target.b_low, target.b_high)
    if proxy is not None:
        return R.gns_transfer_relative(eff.relative, t, (proxy.b_simple, proxy.b_low, proxy.b_high))
    return R.gns_target_relative(eff.relative, _spread(eff), *t)


def decide(
    profile: Profile, eff: Efficiency, limit: Optional[float], target: Any, proxy: Any
) -> dict[str, list[float]]:
    """Each rule's (b, f); the gns rule only with a measured noise scale."""
    from undercap.select import robust as R
    from undercap.select import select_ours

    picks = {
        "paper": select_ours(profile, eff.relative, limit),
        "spread": R.select_spread(profile, eff.relative, _spread(eff), limit),
    }
    if target is not None:
        picks["gns"] = select_ours(profile, gns_relative(eff, target, proxy)[0], limit)
    return {k: [c.batch_size, c.freq_mhz] for k, c in picks.items()}


def _comparison(eff: Efficiency, target: Any, proxy: Any) -> dict[str, Any]:
    from undercap.select import robust as R

    rel_gns = target.relative(sorted(eff.relative)) or {}
    diff = R.disagreements(eff.relative, _spread(eff), target.b_low, target.b_high)
    corrected, why = gns_relative(eff, target, proxy)
    return {
        "relative_proxy": {str(b): r for b, r in sorted(eff.relative.items())},
        "relative_gns": {str(b): r for b, r in sorted(rel_gns.items())},
        "disagree": sorted(diff) if target.b_simple is not None else [],
        "corrected": {str(b): r for b, r in sorted(corrected.items())},
        "why": why,
    }


def apply_check(selection: Any, check: GnsCheck) -> Any:
    """The selection with the check in its extra ("gns_check") and, when the rule
    picked another configuration, that one as the choice: one of the selection's own
    candidates (Algorithm 1's inner loop, with whatever margin it applied), so it is
    feasible under the limit. The baselines' expected speed-ups stay relative to
    Algorithm 1's choice."""
    import dataclasses

    extra = dict(selection.extra, gns_check=check.to_dict())
    b, f = check.trained
    if (selection.batch_size, selection.freq_mhz) == (b, f):
        return dataclasses.replace(selection, extra=extra)
    cands = [c for c in extra.get("candidates", []) if (c["batch_size"], c["freq_mhz"]) == (b, f)]
    if not cands:
        extra["gns_check"] = dict(extra["gns_check"], trained=check.choices["paper"], changed=False)
        extra["gns_check"]["why"] += f"; rule {check.rule}'s choice is not a candidate here: kept"
        return dataclasses.replace(selection, extra=extra)
    c = cands[0]
    n_max, lim = extra.get("samples_bmax"), selection.power_limit_w
    time_s = None if n_max is None else c["time_per_sample_s"] * c["relative_samples"] * n_max
    power = c.get("mean_power_w")
    extra.update(
        predicted_time_s=time_s,
        predicted_energy_j=None if time_s is None or power is None else power * time_s,
        headroom_w=None if lim is None else lim - c["peak_power_w"],
        mean_power_w=power,
        algorithm1_choice=[selection.batch_size, selection.freq_mhz],
    )
    keep = ("batch_size", "freq_mhz", "time_per_sample_s", "peak_power_w", "relative_samples")
    return dataclasses.replace(
        selection,
        **{k: c[k] for k in keep},
        score=c["time_per_sample_s"] * c["relative_samples"],
        method=f"ours ({check.rule} rule)",
        extra=extra,
    )
