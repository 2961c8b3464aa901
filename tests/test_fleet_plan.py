"""The fleet's work balancing (fleet/plan.py) against hand-computed cases; pure, fast."""

from __future__ import annotations

import pytest

from undercap.artifacts.profile import Profile, ProfileRow
from undercap.errors import InfeasibleError, UndercapError
from undercap.fleet.plan import NodeFacts, plan_round, split_work


def _profile(name: str, rows: list) -> Profile:
    """rows: (b, f, seconds per sample, peak W); no margins (the paper's test)."""
    return Profile(
        device={"name": name},
        model="m",
        input_shape=(1,),
        rows=tuple(ProfileRow(b, f, t, p, p) for b, f, t, p in rows),
    )


# A fast node and a slow node; r(32) = 0.5, r(64) = 1.
FAST = _profile("fast", [(32, 100.0, 0.001, 3.0), (64, 100.0, 0.0008, 3.5)])
SLOW = _profile("slow", [(32, 100.0, 0.004, 2.0), (64, 100.0, 0.002, 2.5)])
REL = {32: 0.5, 64: 1.0}


def test_balanced_split_by_hand() -> None:
    # t = (1 ms, 2 ms), r = (0.5, 1), W = 2560: sum 1/(t r) = 2000 + 500 = 2500 per s,
    # T = 2560 / 2500 = 1.024 s; n = T / t = (1024, 512) samples = (32, 8) steps.
    steps = split_work([0.001, 0.002], [0.5, 1.0], [32, 64], 2560, balanced=True)
    assert steps == (32, 8)
    # both finish at 1.024 s: 32 * 32 * 1 ms and 8 * 64 * 2 ms
    assert pytest.approx(8 * 64 * 0.002) == 32 * 32 * 0.001


def test_equal_split_by_hand() -> None:
    # equal progress W / N = 1280 b_max-samples each: n = r * 1280 = (640, 1280)
    # samples = (20, 20) steps; times 0.64 s and 2.56 s: the fast node idles 1.92 s.
    assert split_work([0.001, 0.002], [0.5, 1.0], [32, 64], 2560, balanced=False) == (20, 20)


def test_every_node_takes_at_least_one_step() -> None:
    assert split_work([0.001, 1.0], [1.0, 1.0], [64, 64], 64, balanced=True) == (1, 1)
    with pytest.raises(UndercapError, match="round work"):
        split_work([0.001], [1.0], [64], 0.0, balanced=True)


def test_plan_round_balances_and_predicts_no_idle() -> None:
    # Caps: the fast node cannot run b=64 under 3.2 W -> b=32 (t*r = 0.5 ms);
    # the slow node runs b=64 (t*r = 2 ms < 4 ms * 0.5).
    nodes = [NodeFacts("a", FAST, 3.2), NodeFacts("b", SLOW, 5.0)]
    plan = plan_round(nodes, REL, "balanced", 2560)
    a, b = plan.node("a"), plan.node("b")
    assert (a.batch_size, a.local_steps, b.batch_size, b.local_steps) == (32, 32, 64, 8)
    assert a.predicted_time_s == pytest.approx(1.024) and b.predicted_time_s == pytest.approx(1.024)
    assert plan.predicted_round_s == pytest.approx(1.024)  # no node waits
    equal = plan_round(nodes, REL, "equal", 2560)
    assert equal.node("a").predicted_time_s == pytest.approx(0.64)  # waits 2.56 - 0.64 s
    assert equal.predicted_round_s == pytest.approx(2.56)
    assert equal.predicted_round_s > 2 * plan.predicted_round_s


def test_baseline1_is_the_largest_batch_at_the_safe_clock() -> None:
    prof = _profile(
        "n",
        [
            (32, 100.0, 0.004, 2.0),
            (32, 200.0, 0.002, 2.4),
            (64, 100.0, 0.003, 2.2),
            (64, 200.0, 0.0015, 2.9),
        ],
    )
    node = NodeFacts("n", prof, 2.5)
    b1 = plan_round([node], REL, "baseline1", 640).node("n")
    assert (b1.method, b1.batch_size, b1.freq_mhz) == ("baseline1", 64, 100.0)
    ours = plan_round([node], REL, "equal", 640).node("n")
    # t * r: b=32 at 200 MHz 0.002 * 0.5 = 0.001 beats b=64 at 100 MHz 0.003
    assert (ours.method, ours.batch_size, ours.freq_mhz) == ("ours", 32, 200.0)


def test_a_node_whose_cap_cannot_run_the_model_is_left_out_saying_why() -> None:
    plan = plan_round([NodeFacts("a", FAST, 2.5), NodeFacts("b", SLOW, 5.0)], REL, "balanced", 640)
    assert [n.name for n in plan.nodes] == ["b"]
    (ex,) = plan.excluded
    assert ex.name == "a" and ex.lowest_feasible_w == pytest.approx(3.0)
    assert "left out (fast)" in ex.reason and "2.5 W" in ex.reason
    with pytest.raises(InfeasibleError, match="no node of the fleet"):
        plan_round([NodeFacts("a", FAST, 2.5)], REL, "balanced", 640)


def test_unknown_plan() -> None:
    with pytest.raises(UndercapError, match="unknown fleet plan"):
        plan_round([NodeFacts("a", FAST, 5.0)], REL, "fastest", 640)
