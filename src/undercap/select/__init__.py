"""STEP 3: choose the batch size and GPU frequency (paper Sec. 4.3, 5.1).

core.py is Algorithm 1 and the oracle; baselines.py the paper's Baselines 1 and 2 at
the safe frequency; objectives.py least energy, energy x time, or least time within
an energy budget (`choose`). All pure functions of a Profile and r(b) (core.py).
"""

from undercap.select.baselines import baseline1, baseline2, safe_freq_mhz
from undercap.select.core import (
    BASELINE1,
    BASELINE2,
    ORACLE,
    OURS,
    Choice,
    excluded_batch_sizes,
    expected_speedup,
    lowest_feasible_power_w,
    oracle,
    per_batch,
    select_ours,
)
from undercap.select.objectives import OBJECTIVES, choose, energy_to_target_j

__all__ = [
    "BASELINE1",
    "BASELINE2",
    "OBJECTIVES",
    "ORACLE",
    "OURS",
    "Choice",
    "baseline1",
    "baseline2",
    "choose",
    "energy_to_target_j",
    "excluded_batch_sizes",
    "expected_speedup",
    "lowest_feasible_power_w",
    "oracle",
    "per_batch",
    "safe_freq_mhz",
    "select_ours",
]
