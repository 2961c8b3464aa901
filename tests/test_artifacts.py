"""Artifacts: validation catches every malformed input with one clear message."""

import json
import os

import pytest

from undercap.artifacts import (
    Efficiency,
    Profile,
    ProfileRow,
    load_efficiency,
    load_profile,
    save_efficiency,
    save_json,
    save_profile,
    write_atomic,
)
from undercap.errors import ArtifactError


def _profile() -> Profile:
    rows = tuple(
        ProfileRow(b, f, 1.0 / (b * f), 1.0 + b * f / 1000, 1.0 + b * f / 2000)
        for b in (8, 16)
        for f in (100.0, 200.0)
    )
    return Profile(
        device={"name": "sim:x", "is_simulated": True},
        model="m",
        input_shape=(3, 32, 32),
        rows=rows,
        simulated=True,
    )


def _eff() -> Efficiency:
    return Efficiency(
        model="m",
        dataset="d",
        target_accuracy=0.9,
        samples_to_target={8: (100, 120), 16: (150, None), 32: (None, None)},
        relative={8: 100 / 150 * 1.1 / 1.1, 16: 1.0},
    )


def test_profile_round_trip(tmp_path):
    p = _profile()
    path = save_profile(tmp_path / "p.json", p)
    q = load_profile(path)
    assert q.rows == p.rows and q.input_shape == (3, 32, 32) and q.simulated
    assert q.batch_sizes == (8, 16) and q.freqs_mhz == (100.0, 200.0)


def test_efficiency_round_trip_and_exclusion(tmp_path):
    path = save_efficiency(tmp_path / "e.json", _eff())
    e = load_efficiency(path)
    assert e.samples_to_target[32] == (None, None)
    assert e.excluded_batch_sizes == (32,)
    assert e.relative[16] == 1.0


def _mutated_profile(tmp_path, mutate) -> str:
    obj = _profile().to_dict()
    mutate(obj)
    text = json.dumps(obj)
    path = tmp_path / "bad.json"
    path.write_text(text.replace('"__NAN__"', "NaN"))
    return str(path)


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda o: o.update(schema="undercap.profile/9"), "schema"),
        (lambda o: o.update(rows=[]), "non-empty"),
        (lambda o: o["rows"][0].pop("peak_power_w"), "missing peak_power_w"),
        (lambda o: o["rows"][0].update(peak_power_w="__NAN__"), "finite"),
        (lambda o: o["rows"][0].update(peak_power_w=-3.0), "positive"),
        (lambda o: o["rows"][0].update(time_per_sample_s=0), "positive"),
        (lambda o: o["rows"][0].update(batch_size=2.5), "batch_size"),
        (lambda o: o["rows"].append(dict(o["rows"][0])), "duplicate"),
        (lambda o: o.pop("model"), "missing field 'model'"),
    ],
)
def test_bad_profiles_are_rejected(tmp_path, mutate, words):
    path = _mutated_profile(tmp_path, mutate)
    with pytest.raises(ArtifactError, match=words) as info:
        load_profile(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda o: o["relative"].update({"16": 0.5}), "r = 1.0"),
        (lambda o: o["relative"].update({"64": 0.5}), "no runs"),
        (lambda o: o["samples_to_target"].update({"8": [-5]}), "positive ints"),
        (lambda o: o["relative"].update({"32": 0.7}), "no finished run"),
        (lambda o: o.update(target_accuracy=90), "fraction"),
        (lambda o: o["samples_to_target"].update({"x": [1]}), "not a batch size"),
    ],
)
def test_bad_efficiency_is_rejected(tmp_path, mutate, words):
    obj = _eff().to_dict()
    mutate(obj)
    path = tmp_path / "e.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(ArtifactError, match=words):
        load_efficiency(path)


def test_missing_and_invalid_json(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist"):
        load_profile(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        load_profile(tmp_path / "x.json")


def test_write_atomic_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "a.json"
    write_atomic(target, "old")
    with pytest.raises(ArtifactError):
        save_json(target, {"x": float("nan")})
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.json"]  # no temp files left behind
