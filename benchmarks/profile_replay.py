"""(The tests' and a benchmark's instrument, not the product's; Python 3.6 like the
device path, since the JetPack 4.6 floor's tests import it.) The efficient sweep replayed on a full sweep's measurements: which rows it would
have measured, with no device. It shows (and tests check) that the shortcuts of
sweep.py change nothing but the cost: Algorithm 1 on the replayed rows picks what it
picks on the full table of the same measurements (tests/test_profile_sweep.py,
benchmarks/profile_cost.py)."""

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

from undercap import defaults
from undercap.artifacts.profile import Profile, ProfileRow
from undercap.errors import UndercapError
from undercap.profile.margin import MarginPolicy, near_band_w
from undercap.profile.sweep import SweepOutcome, efficient_sweep


def replay_efficient(
    full: Profile,
    power_limit_w: float,
    relative: Optional[Mapping[int, float]] = None,
    margin_w: Optional[float] = None,
) -> Tuple[Profile, SweepOutcome]:
    """The rows of `full` (a full sweep) the efficient sweep for `power_limit_w` would
    measure, as a profile, and what it decided."""
    by_key = {(r.batch_size, r.freq_mhz): r for r in full.rows}
    batch_sizes, freqs = full.batch_sizes, full.freqs_mhz
    if len(by_key) != len(batch_sizes) * len(freqs):
        raise UndercapError(f"replaying needs a full sweep; {full.model}'s profile has gaps")
    m = full.sweep.get("margin") or {}
    policy = MarginPolicy(
        window_s=float(m.get("window_s", defaults.PEAK_WINDOW_S)),
        sensor_update_s=float(m.get("sensor_update_s", 0.0)),
    )
    rate = float(full.provenance.get("sample_rate_hz", defaults.PROFILE_SAMPLE_RATE_HZ))
    seen: Dict[Tuple[int, float], ProfileRow] = {}

    def probe(b: int, i: int) -> ProfileRow:
        seen[(b, freqs[i])] = by_key[(b, freqs[i])]
        return seen[(b, freqs[i])]

    def need(row: ProfileRow) -> float:
        margin = (row.peak_margin_w or 0.0) if margin_w is None else margin_w
        return row.peak_power_w + margin

    outcome = efficient_sweep(
        batch_sizes,
        len(freqs),
        probe,
        lambda row: need(row) <= power_limit_w,
        lambda row: abs(need(row) - power_limit_w) <= near_band_w(row, policy, rate),
        relative,
    )
    rows = tuple(sorted(seen.values(), key=lambda r: (r.batch_size, r.freq_mhz)))
    replayed = dataclasses.replace(
        full, rows=rows, mode="efficient (replayed)", power_limit_w=power_limit_w
    )
    return replayed, outcome
