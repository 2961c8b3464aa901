"""The efficient sweep's shortcuts (profile/sweep.py): each one tested on tables against
a brute force, then replayed on full sweeps of the simulated Nano and TX2 NX, where it
must pick the same (b, f) as Algorithm 1 on the full table for every r(b) of a test set
(r(b) from benchmarks/results, shifted onto the profiled batch sizes, and synthetic)."""

import json
import random
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from undercap.artifacts.profile import Profile, ProfileRow
from undercap.devices import open_device
from undercap.errors import InfeasibleError
from undercap.profile import ProfileSettings, run_profile
from undercap.profile.sweep import SKIP_BOUND, SKIP_NO_R, SKIP_PRUNED, efficient_sweep
from undercap.select import select_ours

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from profile_replay import replay_efficient  # noqa: E402 - the sweep's replay instrument

REPO = Path(__file__).resolve().parents[1]


# --- tables ---------------------------------------------------------------------------
def table(n_b: int, n_f: int, seed: int) -> Dict[Tuple[int, int], ProfileRow]:
    """A random table with the physics the shortcuts rest on: power rises with the clock
    and with the batch size, time per sample falls with the clock."""
    rng = random.Random(seed)
    rows = {}
    rises = [rng.uniform(0.06, 0.45) for _ in range(n_f)]
    prev = [2.0 + sum(rises[: i + 1]) for i in range(n_f)]
    for j in range(n_b):
        b = 4 << j
        if j:  # a larger batch: more power at every clock, increasingly so
            grow = [rng.uniform(0.0, 0.1) for _ in range(n_f)]
            step = rng.uniform(0.05, 0.4)
            prev = [prev[i] + step + sum(grow[: i + 1]) for i in range(n_f)]
        t = rng.uniform(1e-3, 3e-3) / (1 + 0.3 * j)
        for i in range(n_f):
            rows[(b, i)] = ProfileRow(b, 100.0 * (i + 1), t * 12 / (i + 1), prev[i], prev[i] - 0.1)
    return rows


def brute_highest(rows: dict, b: int, n_f: int, limit: float):
    ok = [i for i in range(n_f) if rows[(b, i)].peak_power_w <= limit]
    return max(ok) if ok else None


def sweep(rows: dict, n_b: int, n_f: int, limit: float, relative=None):
    probed = []

    def probe(b, i):
        probed.append((b, i))
        return rows[(b, i)]

    out = efficient_sweep(
        [4 << j for j in range(n_b)],
        n_f,
        probe,
        lambda r: r.peak_power_w <= limit,
        lambda r: False,
        relative,
    )
    return out, probed


def as_profile(rows) -> Profile:
    return Profile({"name": "table"}, "m", (1,), tuple(rows), mode="full")


@pytest.mark.parametrize("seed", range(40))
def test_search_finds_each_batch_sizes_highest_feasible_clock(seed):
    """Points 1 and 2: galloping + bisection from the smaller batch size's answer finds
    what measuring every clock finds, with fewer measurements."""
    n_b, n_f = 6, 12
    rows = table(n_b, n_f, seed)
    limit = random.Random(seed + 99).uniform(2.5, 6.0)
    out, probed = sweep(rows, n_b, n_f, limit)
    for j in range(n_b):
        b = 4 << j
        assert out.highest_feasible[b] == brute_highest(rows, b, n_f, limit), b
    assert len(set(probed)) == len(probed) <= n_b * n_f
    assert len(probed) < n_b * n_f / 2  # the point of it


def test_smaller_batch_infeasible_everywhere_skips_larger_ones():
    rows = table(4, 6, 3)
    out, probed = sweep(rows, 4, 6, limit=0.5)
    assert out.highest_feasible == {4: None, 8: None, 16: None, 32: None}
    assert {b for b, _ in probed} == {4}  # only the smallest batch size was measured
    assert out.skipped[next(iter(k for k in out.skipped if k != SKIP_BOUND))] > 0


@pytest.mark.parametrize("seed", range(40))
def test_pruning_keeps_algorithm_1s_choice(seed):
    """Point 3: batch sizes pruned by t(b, f_hi) x r(b) never held the choice."""
    n_b, n_f = 6, 12
    rows = table(n_b, n_f, seed)
    rng = random.Random(seed)
    limit = rng.uniform(3.0, 6.0)
    relative = {4 << j: rng.uniform(0.1, 1.0) for j in range(n_b)}
    relative[4 << (n_b - 1)] = 1.0
    out, probed = sweep(rows, n_b, n_f, limit, relative)
    full = as_profile(rows.values())
    try:
        want = select_ours(full, relative, limit)
    except Exception:
        want = None
    got = select_ours(as_profile(rows[k] for k in set(probed)), relative, limit) if want else None
    if want is not None:
        assert (got.batch_size, got.freq_mhz) == (want.batch_size, want.freq_mhz)
    _, unpruned = sweep(rows, n_b, n_f, limit)
    assert len(probed) <= len(unpruned)


def test_pruning_skips_a_batch_size_that_cannot_win():
    rows = table(3, 8, 1)
    relative = {4: 0.1, 8: 5.0, 16: 1.0}  # b=8 needs 5x the samples: cannot win
    out, probed = sweep(rows, 3, 8, limit=99.0, relative=relative)
    assert 8 not in out.highest_feasible or out.highest_feasible[8] is not None
    out, probed = sweep(rows, 3, 8, limit=rows[(8, 3)].peak_power_w, relative=relative)
    assert 8 in out.pruned and out.skipped[SKIP_PRUNED] > 0
    assert [i for b, i in probed if b == 8] == [out.highest_feasible[4]]  # one probe


def test_batch_sizes_without_r_are_not_measured():
    rows = table(3, 6, 2)
    out, probed = sweep(rows, 3, 6, limit=99.0, relative={4: 0.5, 16: 1.0})
    assert all(b != 8 for b, _ in probed) and out.skipped[SKIP_NO_R] == 6


def test_noise_guard_finds_a_feasible_row_above_a_near_infeasible_one():
    """Point 4: a row read a hair above the limit (noise) below one read under it; the
    full table's Algorithm 1 takes the higher, so must the sweep."""
    rows = {(4, i): ProfileRow(4, 100.0 * (i + 1), 1e-3, 3.0 + 0.4 * i, 2.9) for i in range(8)}
    rows[(4, 4)] = ProfileRow(4, 500.0, 1e-3, 5.02, 4.9)  # noise: just above 5 W
    rows[(4, 5)] = ProfileRow(4, 600.0, 1e-3, 4.99, 4.9)  # ... and just under it
    near = lambda r: abs(r.peak_power_w - 5.0) <= 0.05  # noqa: E731
    out = efficient_sweep([4], 8, lambda b, i: rows[(b, i)], lambda r: r.peak_power_w <= 5.0, near)
    assert out.highest_feasible[4] == 5
    blind = efficient_sweep(
        [4], 8, lambda b, i: rows[(b, i)], lambda r: r.peak_power_w <= 5.0, lambda r: False
    )
    assert blind.highest_feasible[4] == 3  # without the guard it stops below


# --- replayed on simulated devices -------------------------------------------------------
def r_vectors(batch_sizes: Tuple[int, ...]) -> List[Dict[int, float]]:
    """r(b) of the benchmarks (as measured, and shifted onto these batch sizes, largest
    aligned), plus synthetic shapes: perfect scaling, none, and in between."""
    found = []
    for path in sorted((REPO / "benchmarks" / "results").glob("**/efficiency*.json")):
        obj = json.loads(path.read_text())
        rel = obj.get("relative") or obj.get("efficiency", {}).get("relative")
        if rel:
            found.append({int(b): float(r) for b, r in rel.items()})
    out = []
    for rel in found:
        common = {b: r for b, r in rel.items() if b in batch_sizes}
        if len(common) >= 2:
            out.append(common)
        values = [rel[b] for b in sorted(rel)]
        shifted = dict(zip(sorted(batch_sizes)[-len(values) :], values[-len(batch_sizes) :]))
        out.append(shifted)
    b_max = max(batch_sizes)
    for alpha in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append({b: (b / b_max) ** alpha for b in batch_sizes})
    return out


SHAPES = {"resnet18": (3, 32, 32), "mobilenetv2": (3, 32, 32), "char-transformer": (64,)}
CASES = [
    ("resnet18", "sim:jetson-nano", (4, 8, 16, 32, 64, 128), 5.0),
    ("mobilenetv2", "sim:jetson-nano", (4, 8, 16, 32, 64), 5.0),
    ("char-transformer", "sim:jetson-nano", (4, 8, 16, 32, 64, 128), 5.0),
    ("resnet18", "sim:jetson-tx2nx", (4, 8, 16, 32, 64, 128), 6.5),
    ("mobilenetv2", "sim:jetson-tx2nx", (4, 8, 16, 32, 64), 6.5),
    ("char-transformer", "sim:jetson-tx2nx", (4, 8, 16, 32, 64, 128), 6.5),
]


def full_profile(model: str, device: str, batch_sizes) -> Profile:
    dev = open_device(device, seed=0)
    return run_profile(
        dev,
        model,
        SHAPES[model],
        batch_sizes,
        num_classes=65 if model == "char-transformer" else 10,
        settings=ProfileSettings(host_steps=False),
        progress=False,
    )


def choice_of(profile: Profile, relative: Dict[int, float], limit: float):
    try:
        c = select_ours(profile, relative, limit)
    except InfeasibleError:
        return None
    return c.batch_size, c.freq_mhz


def check_same_choice(full: Profile, limits: List[float]) -> int:
    """Every r(b) of the test set, unpruned (one replay serves them all) and pruned
    with that r(b) itself; returns how many choices were compared."""
    checked = 0
    vectors = r_vectors(full.batch_sizes)
    for limit in limits:
        plain, _ = replay_efficient(full, limit)
        assert len(plain.rows) < len(full.rows)
        for relative in vectors:
            want = choice_of(full, relative, limit)
            pruned, _ = replay_efficient(full, limit, relative)
            assert len(pruned.rows) <= len(plain.rows)
            for eff in (plain, pruned):
                assert choice_of(eff, relative, limit) == want, (limit, relative)
                checked += 1
    return checked


def limits_of(full: Profile, nominal: float) -> List[float]:
    """The case's cap and caps between the model's lowest and highest needs."""
    need = sorted(r.peak_power_w + (r.peak_margin_w or 0.0) for r in full.rows)
    lo, hi = need[0], need[-1]
    return [nominal] + [lo + (hi - lo) * q for q in (0.2, 0.5, 0.8)]


@pytest.mark.parametrize("model, device, batch_sizes, limit", CASES)
def test_replay_picks_the_full_sweeps_choice(model, device, batch_sizes, limit):
    full = full_profile(model, device, batch_sizes)
    assert check_same_choice(full, limits_of(full, limit)) > 40
