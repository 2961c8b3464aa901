"""The baselines' safe frequency (paper Sec. 5.1): the highest clock at which no
supported model exceeds a power limit, derived from every built-in model's profile
on the device rather than typed in."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Optional

from undercap import defaults
from undercap.artifacts.cache import Cache
from undercap.artifacts.profile import Profile, load_profile
from undercap.devices.base import Device
from undercap.models.registry import BUILTIN
from undercap.recipes.common import Log, profile_model, stderr_log
from undercap.select import safe_freq_mhz


def safe_profiles(
    device: Device,
    scenario_profile: Profile,
    *,
    cache: Cache,
    given: Sequence[str] = (),
    progress: bool = True,
    log: Log = stderr_log,
    precision: str = "fp32",
) -> list[Profile]:
    """Profiles of every supported model on this device, for the baselines' safe frequency.

    Simulated devices: each model at its default input shape and the default batch
    sizes (those that fit), profiled from the device model without host compute and
    cached. Real devices: the scenario's own profile plus `given` measured profiles;
    without them the safe frequency is only safe for this model, and we say so.
    """
    profiles = [scenario_profile] + [load_profile(p) for p in given]
    if device.is_simulated:
        for spec in BUILTIN.values():
            profiles.append(
                profile_model(
                    device,
                    spec.name,
                    spec.default_input_shape or (),
                    defaults.PROFILE_BATCH_SIZES,
                    num_classes=spec.profile_classes(),
                    cache=cache,
                    host_steps=False,
                    progress=progress,
                    log=log,
                    precisions=(precision,),
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
    profiles: Iterable[Profile],
    limits: Iterable[Optional[float]],
    margin_w: Optional[float] = None,
    *,
    own: Optional[Profile] = None,
) -> dict[Optional[float], float]:
    """The baselines' safe frequency per power limit (select.safe_freq_mhz); no limit
    means every frequency is allowed, so the highest.

    The fleet's cap follows the paper (Sec. 5.1): no supported model's profiled peak
    above the limit. The scenario's own model (`own`), whose baseline runs are the
    ones trained and checked against the limit, must also clear its safety margin
    (`margin_w`, None: its measured ones). Both sets of safe clocks are prefixes of
    the table (power rises with the clock), so the lower answer is safe for both."""
    profs = list(profiles)
    out = {}
    for lim in limits:
        if lim is None:
            out[lim] = max(f for p in profs for f in p.freqs_mhz)
            continue
        f = safe_freq_mhz(profs, lim, margin_w=0.0)
        out[lim] = f if own is None else min(f, safe_freq_mhz([own], lim, margin_w=margin_w))
    return out
