"""`undercap select`: output agrees with select_ours; bad input -> one error line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from select_helpers import figure1_profile, make_efficiency

from undercap.artifacts import load_efficiency, load_profile, save_efficiency, save_profile
from undercap.cli import main
from undercap.select import baseline1, safe_freq_mhz, select_ours

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "profile": save_profile(tmp_path / "profile.json", figure1_profile()),
        "eff": save_efficiency(
            tmp_path / "eff.json", make_efficiency({16: 0.6, 32: 0.8, 64: 1.0}, never=[8])
        ),
    }


def run(capsys, profile: Path, eff: Path, limit: str = "5.5", *extra: str):
    args = ["select", "--profile", str(profile), "--efficiency", str(eff), "--power-limit", limit]
    rc = main([*args, *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_output_agrees_with_select_ours(files, capsys):
    rc, out, err = run(capsys, files["profile"], files["eff"], "5.5", "--json")
    assert rc == 0 and err == ""
    res = json.loads(out)
    p, e = load_profile(files["profile"]), load_efficiency(files["eff"])
    c = select_ours(p, e.relative, 5.5)
    for key, value in c.to_dict().items():
        assert res[key] == value
    assert (res["batch_size"], res["freq_mhz"], res["power_limit_w"]) == (16, 600.0, 5.5)
    assert res["simulated"] is True and res["model"] == "resnet18"
    assert res["excluded_batch_sizes"] == [
        {"batch_size": 8, "reason": "never reached 90% accuracy on digits"}
    ]
    b1 = baseline1(p, 5.5, safe_freq_mhz([p], 5.5), relative=e.relative)
    assert res["safe_freq_mhz"] == 400.0 and "this profile alone" in res["safe_freq_source"]
    assert res["baseline1"]["batch_size"] == b1.batch_size == 64
    assert res["baseline1"]["expected_speedup"] == pytest.approx(b1.score / c.score)
    assert res["baseline1"]["expected_speedup"] == pytest.approx(1.25)
    assert res["baseline2"]["available"] is True


def test_human_summary(files, capsys):
    rc, out, _ = run(capsys, files["profile"], files["eff"], "5.5")
    assert rc == 0
    assert "batch size 16 at 600 MHz" in out and "simulated" in out
    assert "1.25x" in out and "8: never reached" in out and "5.00 W of 5.5 W" in out


def test_safe_freq_and_proxy_options(files, tmp_path, capsys):
    proxy = save_efficiency(tmp_path / "proxy.json", make_efficiency({8: 0.1, 64: 1.0}))
    rc, out, _ = run(
        capsys,
        files["profile"],
        files["eff"],
        "5.5",
        "--json",
        "--safe-freq-mhz",
        "200",
        "--proxy-efficiency",
        str(proxy),
    )
    res = json.loads(out)
    assert rc == 0 and res["safe_freq_mhz"] == 200.0 and "given" in res["safe_freq_source"]
    assert (res["baseline1"]["batch_size"], res["baseline1"]["freq_mhz"]) == (64, 200.0)
    # baseline 2 follows the proxy's r (b=8 is 10x cheaper there) ...
    assert res["baseline2"]["batch_size"] == 8
    # ... but its speed-up is judged with --efficiency, where b=8 has no r.
    assert res["baseline2"]["expected_speedup"] is None
    assert "never reached" in res["baseline2"]["speedup_note"]


def test_low_limit_reports_baselines_unavailable(files, capsys):
    rc, out, _ = run(capsys, files["profile"], files["eff"], "3.5", "--json")
    res = json.loads(out)
    assert rc == 0 and res["batch_size"] == 32 and res["safe_freq_mhz"] is None
    assert res["baseline1"]["available"] is False
    assert "raise the power limit" in res["baseline1"]["reason"]
    assert {"batch_size": 64, "reason": "needs at least 3.60 W, above the 3.5 W limit"} in res[
        "excluded_batch_sizes"
    ]


# --- bad input: exit 2, exactly one `error:` line ------------------------------------
def _edit_profile(path: Path, edit) -> Path:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))
    return path


def _del_rows(o):
    del o["rows"]


def _empty_rows(o):
    o["rows"] = []


def _row_missing_field(o):
    del o["rows"][0]["peak_power_w"]


def _negative_power(o):
    o["rows"][3]["peak_power_w"] = -1.0


def _duplicate_row(o):
    o["rows"].append(dict(o["rows"][0]))


def _wrong_schema(o):
    o["schema"] = "undercap.profile/0"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_del_rows, "missing field 'rows'"),
        (_empty_rows, "non-empty"),
        (_row_missing_field, "missing peak_power_w"),
        (_negative_power, "peak_power_w must be positive"),
        (_duplicate_row, "duplicate row"),
        (_wrong_schema, "schema"),
    ],
)
def test_bad_profile_is_one_error_line(files, capsys, edit, needle):
    _edit_profile(files["profile"], edit)
    rc, out, err = run(capsys, files["profile"], files["eff"])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err


def test_nan_literal_in_profile(files, capsys):
    text = files["profile"].read_text()
    files["profile"].write_text(text.replace('"peak_power_w": 5.2', '"peak_power_w": NaN', 1))
    assert "NaN" in files["profile"].read_text()
    rc, _, err = run(capsys, files["profile"], files["eff"])
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert "finite" in err


def test_swapped_files_wrong_schema(files, capsys):
    rc, _, err = run(capsys, files["eff"], files["profile"])
    assert rc == 2 and err.startswith("error: ") and "schema" in err and err.count("\n") == 1


def test_infeasible_limit(files, capsys):
    rc, out, err = run(capsys, files["profile"], files["eff"], "2.5")
    assert rc == 2 and out == "" and err.count("\n") == 1
    # b=8 is cheapest but has no r; the lowest feasible is b=16 at 200 MHz: 2 + 0.8 * 1.25
    assert err.startswith("error: no configuration") and "3.00 W" in err
    assert "raise the power limit" in err


def test_missing_file(files, tmp_path, capsys):
    rc, _, err = run(capsys, tmp_path / "nope.json", files["eff"])
    assert rc == 2 and err.startswith("error: ") and "does not exist" in err
    assert err.count("\n") == 1


def test_model_mismatch_names_both(files, tmp_path, capsys):
    other = save_efficiency(
        tmp_path / "other.json", make_efficiency({16: 0.5, 64: 1.0}, model="mobilenetv2")
    )
    rc, _, err = run(capsys, files["profile"], other)
    assert rc == 2 and err.count("\n") == 1
    assert "'resnet18'" in err and "'mobilenetv2'" in err
    rc, _, err = run(
        capsys, files["profile"], files["eff"], "5.5", "--proxy-efficiency", str(other)
    )
    assert rc == 2 and "'mobilenetv2'" in err


def test_bad_power_limit_is_a_usage_error(files, capsys):
    with pytest.raises(SystemExit) as e:
        run(capsys, files["profile"], files["eff"], "nan")
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_select_does_not_import_torch(files):
    code = (
        "import sys\n"
        "from undercap.cli import main\n"
        f"rc = main(['select', '--profile', {str(files['profile'])!r}, "
        f"'--efficiency', {str(files['eff'])!r}, '--power-limit', '5.5', '--json'])\n"
        "assert rc == 0, rc\n"
        "heavy = [m for m in ('torch', 'matplotlib') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["batch_size"] == 16
