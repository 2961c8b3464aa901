"""Energy, energy x time and energy-budget objectives: pure functions checked against
a brute force over every row, and the `select --objective` command."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from undercap.artifacts import Profile, ProfileRow
from undercap.errors import InfeasibleError
from undercap.select import choose, energy_to_target_j, select_ours

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BATCHES, FREQS = (8, 16, 32, 64), (300.0, 600.0, 900.0)


@st.composite
def profiles(draw):
    rows = []
    for b in BATCHES:
        for f in FREQS:
            if draw(st.booleans()) or (b, f) == (64, 300.0):
                t = draw(st.floats(1e-4, 1e-2))
                peak = draw(st.floats(2.0, 8.0))
                mean = peak * draw(st.floats(0.5, 1.0))
                rows.append(ProfileRow(b, f, t, peak, mean))
    return Profile(device={"name": "sim:x"}, model="m", input_shape=(3, 8, 8), rows=tuple(rows))


def relatives(profile: Profile):
    return st.fixed_dictionaries({b: st.floats(0.1, 3.0) for b in profile.batch_sizes})


def brute(profile, relative, limit, key):
    """The best (row, r) over every row within the limit, by `key`, ties to larger b
    then higher f (the selection's tie rule)."""
    rows = [
        (row, relative[row.batch_size])
        for row in profile.rows
        if row.batch_size in relative and (limit is None or row.peak_power_w <= limit)
    ]
    if not rows:
        return None
    return min(rows, key=lambda x: (key(*x), -x[0].batch_size, -x[0].freq_mhz))


@SETTINGS
@given(
    data=st.data(),
    limit=st.one_of(st.none(), st.floats(2.0, 9.0)),
    obj=st.sampled_from(["energy", "edp"]),
)
def test_energy_objectives_match_brute_force(data, limit, obj):
    profile = data.draw(profiles())
    _check_against_brute(profile, data.draw(relatives(profile)), limit, obj)


def test_a_tie_within_float_rounding_is_not_a_mismatch():
    """Two rows whose energies agree to one ulp: (P*t)*r orders them one way, P*(t*r)
    the other (hypothesis found such a pair: mean power 1.40625 vs 1.4062500000000002).
    Either is a right answer; the check compares costs within a tolerance."""
    rows = (
        ProfileRow(64, 300.0, 0.002, 3.0, 2.25),
        ProfileRow(64, 600.0, 0.0013333333333333333, 4.0, 3.375),
    )
    profile = Profile(device={"name": "sim:x"}, model="m", input_shape=(3, 8, 8), rows=rows)
    _check_against_brute(profile, {64: 1.5367617525666288}, None, "energy")


def _check_against_brute(profile, rel, limit, obj):
    """The choice costs what the brute force's best costs (relative 1e-9: the two
    multiply in different orders), and is feasible."""

    def energy(row, r):
        return row.mean_power_w * row.time_per_sample_s * r

    def key(row, r):
        return energy(row, r) if obj == "energy" else energy(row, r) * row.time_per_sample_s * r

    best = brute(profile, rel, limit, key)
    if best is None:
        with pytest.raises(InfeasibleError):
            choose(profile, rel, limit, objective=obj)
        return
    c = choose(profile, rel, limit, objective=obj)
    (row,) = [x for x in profile.rows if (x.batch_size, x.freq_mhz) == (c.batch_size, c.freq_mhz)]
    assert limit is None or row.peak_power_w <= limit
    assert key(row, rel[row.batch_size]) == pytest.approx(key(*best), rel=1e-9, abs=0)
    assert c.objective == obj and c.score == pytest.approx(key(*best), rel=1e-9, abs=0)


@SETTINGS
@given(
    data=st.data(), limit=st.one_of(st.none(), st.floats(2.0, 9.0)), budget=st.floats(1.0, 400.0)
)
def test_energy_budget_matches_brute_force(data, limit, budget):
    profile = data.draw(profiles())
    rel = data.draw(relatives(profile))
    n_max = 5_000.0
    feasible = [
        (row, rel[row.batch_size])
        for row in profile.rows
        if limit is None or row.peak_power_w <= limit
    ]
    fits = [(row, r) for row, r in feasible if energy_to_target_j(row, r, n_max) <= budget]
    if not feasible:
        with pytest.raises(InfeasibleError, match="power limit"):
            choose(profile, rel, limit, energy_budget_j=budget, samples_bmax=n_max)
        return
    if not fits:
        with pytest.raises(InfeasibleError, match="raise --energy-budget-j to at least"):
            choose(profile, rel, limit, energy_budget_j=budget, samples_bmax=n_max)
        return
    best = min(
        fits, key=lambda x: (x[0].time_per_sample_s * x[1], -x[0].batch_size, -x[0].freq_mhz)
    )
    c = choose(profile, rel, limit, energy_budget_j=budget, samples_bmax=n_max)
    assert (c.batch_size, c.freq_mhz) == (best[0].batch_size, best[0].freq_mhz)


def test_time_objective_is_algorithm_1():
    profile = Profile(
        device={"name": "sim:x"},
        model="m",
        input_shape=(1,),
        rows=(ProfileRow(8, 300.0, 2e-3, 3.0, 2.5), ProfileRow(8, 900.0, 1e-3, 5.0, 4.5)),
    )
    assert choose(profile, {8: 1.0}, 6.0) == select_ours(profile, {8: 1.0}, 6.0)
    # least energy: 4.5 W x 1 ms beats 2.5 W x 2 ms (the fast clock races to idle)
    e = choose(profile, {8: 1.0}, 6.0, objective="energy")
    assert e.freq_mhz == 900.0 and e.score == pytest.approx(4.5e-3)


def _write(tmp_path, rows, relative):
    profile = Profile(device={"name": "sim:x"}, model="m", input_shape=(1,), rows=tuple(rows))
    p = tmp_path / "p.json"
    p.write_text(json.dumps(profile.to_dict()))
    e = tmp_path / "e.json"
    runs = {str(b): [round(r * 1000)] for b, r in relative.items()}
    e.write_text(
        json.dumps(
            {
                "schema": "undercap.efficiency/1",
                "model": "m",
                "dataset": "d",
                "target_accuracy": 0.9,
                "samples_to_target": runs,
                "relative": {str(b): r for b, r in relative.items()},
            }
        )
    )
    return p, e


def test_select_cli_objectives_and_budget(tmp_path, capsys):
    from undercap.cli import main

    rows = [
        ProfileRow(8, 300.0, 4e-3, 3.0, 2.0),  # slow, frugal: 8 mJ per sample
        ProfileRow(8, 900.0, 1e-3, 5.0, 5.0),  # fast, hungry: 5 mJ per sample
        ProfileRow(16, 300.0, 3e-3, 3.5, 1.5),  # 4.5 mJ x r
        ProfileRow(16, 900.0, 1.5e-3, 6.0, 4.0),
    ]
    p, e = _write(tmp_path, rows, {8: 0.5, 16: 1.0})
    base = ["select", "--profile", str(p), "--efficiency", str(e), "--power-limit", "10", "--json"]
    assert main([*base, "--objective", "energy"]) == 0
    out = json.loads(capsys.readouterr().out)
    # energy per N(b_max) sample: b=8: 2.0*4e-3*0.5=4e-3, 5*1e-3*0.5=2.5e-3; b=16: 4.5e-3, 6e-3
    assert (out["batch_size"], out["freq_mhz"], out["objective"]) == (8, 900.0, "energy")
    assert out["predicted_energy_j"] == pytest.approx(2.5e-3 * 1000)
    assert main([*base, "--energy-budget-j", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no configuration reaches the target within 1 J") and "2 J" in err
