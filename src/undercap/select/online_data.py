"""What a selection carries so that a device re-selects with the `online` rule (online.py)
without the server: the selection's `online` block.

    "online": {
      "samples_bmax": <the target's N(b_max) as guessed before training: the proxies' median>,
      "proxies": [{"name": str, "relative": {"<b>": r_p(b)}, "target_accuracy": float,
                   "samples_bmax": N_p(b_max), "curves": {"<b>": [[[samples, accuracy],
                   ...] per seed]}}, ...]
    }

Each proxy's recorded curves are the efficiency estimate's own (`curves` of the
efficiency artifact), at the batch sizes every proxy has an r(b) for (the candidates of
any cap), each thinned to at most defaults.ONLINE_CURVE_POINTS points. A selection made
from one proxy, or from estimates without recorded curves, has no block: the rule then
has nothing to re-weigh (one proxy's weight is always 1), which `from_block` says.
Plain data in and out (no profile, no torch); on the device path (Python 3.6).
"""

import statistics
import typing
from typing import Any, Dict, List, Optional, Sequence

from undercap import defaults
from undercap.errors import UndercapError
from undercap.select.online import Point, ProxyCurves

ONLINE_KEY = "online"
#: what a selection without the block is missing, and how to make one that has it
MISSING = (
    "has no online block (each proxy's r(b) and recorded curves): --online re-weighs "
    "several proxies, so make the selection from two or more estimates that record their "
    "curves (`undercap run --proxy A --proxy B ...`, or `undercap select --efficiency A "
    "--efficiency B --json`)"
)


def thin(curve: Sequence[Point], most: int = defaults.ONLINE_CURVE_POINTS) -> List[List[float]]:
    """At most `most` points of a curve, evenly spread by index, its ends kept."""
    pts = [[float(n), float(a)] for n, a in curve]
    if len(pts) <= most:
        return pts
    step = (len(pts) - 1) / (most - 1)
    return [pts[round(i * step)] for i in range(most)]


def proxy_block(
    name: str, eff: Any, batch_sizes: Sequence[int], most: int = defaults.ONLINE_CURVE_POINTS
) -> Optional[Dict[str, Any]]:
    """One proxy's entry from its Efficiency (artifacts/efficiency.py); None when it
    recorded no curves at one of `batch_sizes` or has no N(b_max)."""
    raw = eff.extra.get("curves") or {}
    n_max = eff.samples_bmax
    if n_max is None or any(not raw.get(str(b)) for b in batch_sizes):
        return None
    curves = {
        str(b): [thin(raw[str(b)][s], most) for s in sorted(raw[str(b)], key=int)]
        for b in batch_sizes
    }
    return {
        "name": name,
        "relative": {str(b): float(eff.relative[b]) for b in batch_sizes},
        "target_accuracy": float(eff.target_accuracy),
        "samples_bmax": float(n_max),
        "curves": curves,
    }


def online_block(names: Sequence[str], members: Sequence[Any]) -> Optional[Dict[str, Any]]:
    """The block for several proxies (names and Efficiency objects, an EfficiencySet's),
    at the batch sizes all of them have an r(b) for; None with fewer than two proxies or
    where one recorded no curves."""
    if len(members) < 2:
        return None
    common = sorted(set.intersection(*(set(e.relative) for e in members)))
    entries = [proxy_block(n, e, common) for n, e in zip(names, members)]
    if not common or any(x is None for x in entries):
        return None
    n_max = statistics.median(x["samples_bmax"] for x in entries)  # type: ignore[index]
    return {"samples_bmax": n_max, "proxies": entries}


class OnlineData(typing.NamedTuple):
    """The block, read: the proxies and the target's N(b_max) guess."""

    proxies: typing.Tuple[ProxyCurves, ...]
    samples_bmax: float


def from_block(extra: typing.Mapping[str, Any], where: str = "the selection") -> OnlineData:
    """The proxies of a selection's `extra` (its block), checked; one line when absent."""
    block = extra.get(ONLINE_KEY)
    if not isinstance(block, dict) or len(block.get("proxies") or []) < 2:
        raise UndercapError(f"{where} {MISSING}")
    try:
        proxies = tuple(_proxy(p) for p in block["proxies"])
        n_max = float(block["samples_bmax"])
    except (KeyError, TypeError, ValueError) as e:
        raise UndercapError(f"{where}: its online block is malformed ({e!r})") from e
    if not n_max > 0 or any(not p.target_accuracy > 0 for p in proxies):
        raise UndercapError(f"{where}: its online block has a non-positive N(b_max) or target")
    return OnlineData(proxies, n_max)


def _proxy(obj: typing.Mapping[str, Any]) -> ProxyCurves:
    curves = {
        int(b): [[(float(n), float(a)) for n, a in seed] for seed in seeds]
        for b, seeds in obj["curves"].items()
    }
    if any(not seeds or not all(seeds) for seeds in curves.values()):
        raise ValueError(f"proxy {obj.get('name')!r} has an empty curve")
    return ProxyCurves(
        name=str(obj["name"]),
        relative={int(b): float(r) for b, r in obj["relative"].items()},
        curves=curves,
        target_accuracy=float(obj["target_accuracy"]),
        samples_bmax=float(obj["samples_bmax"]),
    )
