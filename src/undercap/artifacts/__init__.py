"""Every on-disk format undercap reads and writes, and how it writes them.

One module per artifact: `profile` (t(b, f), P(b, f)), `efficiency` (N(b), r(b)),
`selection`, `train_result`, `comparison`; plus `io` (atomic writes, JSON), `cache`,
`workload` and `provenance`. All JSON with a `schema` field, validated on load, written
atomically (docs/reference/formats.md). Nothing here imports torch.
"""

from undercap.artifacts.efficiency import (
    EFFICIENCY_SCHEMA,
    Efficiency,
    load_efficiency,
    save_efficiency,
)
from undercap.artifacts.io import atomic_path, load_json, save_json, write_atomic
from undercap.artifacts.profile import (
    PROFILE_SCHEMA,
    Profile,
    ProfileRow,
    load_profile,
    save_profile,
)

__all__ = [
    "EFFICIENCY_SCHEMA",
    "PROFILE_SCHEMA",
    "Efficiency",
    "Profile",
    "ProfileRow",
    "atomic_path",
    "load_efficiency",
    "load_json",
    "load_profile",
    "save_efficiency",
    "save_json",
    "save_profile",
    "write_atomic",
]
