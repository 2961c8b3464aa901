"""scripts/device-check.sh (issue 32): the device check in one command, rehearsed on the CPU
(--dry-run: the simulated Jetson Nano, read-only, tiny slices), and its summary helper
scripts/device_check_summary.py on the real H200 measurements."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "device-check.sh"
HELPER = REPO / "scripts" / "device_check_summary.py"
STAGES = [
    "nvidia-smi",
    "devices",
    "profile",
    "estimate-resnet18",
    "estimate-mobilenetv2",
    "estimate-char-transformer",
    "run",
    "profile-mixed",
    "estimate-resnet18-mixed",
    "tests",
]


def _load(name: str, path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


summary = _load("device_check_summary", HELPER)


def _not_inside_a_check() -> None:
    # the check's own tests stage runs the suite: do not start a check inside a check
    if os.environ.get("UNDERCAP_DEVICE_CHECK"):
        pytest.skip("inside a device check (UNDERCAP_DEVICE_CHECK is set)")
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("needs bash and coreutils' timeout")


def _check(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("UNDERCAP", None)
    env["PYTHON"] = sys.executable  # this interpreter (.venv-jp5 in CI's JetPack 5 job)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _records(out: Path) -> list[dict]:
    records = json.loads((out / "summary.json").read_text())
    assert isinstance(records, list)
    for r in records:
        assert r["status"] in ("passed", "failed", "timeout", "interrupted", "skipped"), r
        if r["status"] == "skipped":
            assert r["exit_code"] is None and r["key"], r
        else:  # every stage that ran has its exit code and wall time recorded
            assert isinstance(r["exit_code"], int) and r["wall_s"] is not None, r
            assert r["wall_s"] <= r["limit_s"] + 15, r
        if r["status"] in ("failed", "timeout"):
            assert r["error"], r
    try:
        import pandas as pd
    except ImportError:
        pass
    else:
        df = pd.read_json(out / "summary.json")
        assert list(df["stage"]) == [r["stage"] for r in records]
    return records


def _table_rows(out: Path) -> dict[str, list[str]]:
    rows = {}
    for line in (out / "summary.md").read_text().splitlines():
        if line.startswith("| ") and not line.startswith(("| stage", "|---")):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells
    return rows


@pytest.mark.slow  # about 1 min idle, 2 on two busy cores: seven undercap processes
def test_dry_run_writes_every_stage(tmp_path: Path, shared_data: Path) -> None:
    _not_inside_a_check()
    out = tmp_path / "dc"
    p = _check(["--dry-run", "--data-dir", str(shared_data), "--out", str(out)], timeout=400)
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr[-3000:]
    records = _records(out)
    assert [r["stage"] for r in records] == STAGES
    by = {r["stage"]: r for r in records}
    assert p.returncode == (0 if all(r["status"] in ("passed", "skipped") for r in records) else 1)
    assert by["devices"]["status"] == "passed"
    assert by["devices"]["numbers"]["found"] is True  # sim:jetson-nano listed
    assert by["profile"]["status"] == "passed" and by["profile"]["numbers"]["rows"] == 2
    for model in ("resnet18", "mobilenetv2", "char-transformer"):
        n = by[f"estimate-{model}"]["numbers"]
        assert by[f"estimate-{model}"]["status"] == "passed", by[f"estimate-{model}"]
        assert set(n["N_b"]) == {"2", "4"}, n
    assert by["run"]["numbers"]["cap_w"] > 0  # a cap derived from the profile
    mixed = by["profile-mixed"]
    assert mixed["status"] == "passed", mixed
    assert set(mixed["numbers"]["time_ratio"]) == {"2", "4"}, mixed  # beside fp32's rows
    assert all(v > 0 for v in mixed["numbers"]["peak_ratio"].values()), mixed
    assert by["estimate-resnet18-mixed"]["status"] == "passed", by["estimate-resnet18-mixed"]
    assert set(by["estimate-resnet18-mixed"]["numbers"]["N_b"]) == {"2", "4"}
    assert by["tests"]["numbers"].get("passed", 0) + by["tests"]["numbers"].get("failed", 0) > 0
    rows = _table_rows(out)
    assert list(rows) == STAGES
    for stage, r in by.items():
        assert rows[stage][1] == ("-" if r["exit_code"] is None else str(r["exit_code"]))
    # at most 8 files, one of them every log
    files = sorted(f.name for f in out.iterdir())
    assert len(files) <= 8, files
    assert {"summary.md", "summary.json", "logs.tgz", "profile-resnet18.json"} <= set(files)
    with tarfile.open(out / "logs.tgz") as tar:
        names = tar.getnames()
    for log in ("devices.txt", "devices.json", "profile.log", "run.log", "pytest.log", "env.txt"):
        assert f"logs/{log}" in names, names
    assert not [n for n in names if n.endswith(".pt")]  # no checkpoint weights


def test_one_stage_dry_run_writes_the_results_folder(tmp_path: Path, shared_data: Path) -> None:
    """The plumbing in seconds: stages chosen with --stages, the summary of what ran."""
    _not_inside_a_check()
    out = tmp_path / "dc"
    args = ["--dry-run", "--data-dir", str(shared_data), "--out", str(out), "--stages", "devices"]
    p = _check(args, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    records = _records(out)
    assert [r["stage"] for r in records] == ["devices"]
    assert records[0]["numbers"]["device"] == "sim:jetson-nano"
    assert "DRY RUN" in (out / "summary.md").read_text()
    assert sorted(f.name for f in out.iterdir()) == ["logs.tgz", "summary.json", "summary.md"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown argument '--bogus'"),
        (["--timeout", "nonsense=3"], "unknown stage 'nonsense'"),
        (["--timeout", "run=soon"], "whole seconds"),
        (["--stages", "devices,nope"], "unknown stage 'nope'"),
        (["--data-dir", "/nonexistent"], "cifar10-quarter-a.npz not found"),
    ],
)
def test_bad_invocations_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    _not_inside_a_check()
    p = _check([*args, "--out", str(tmp_path / "dc")], timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "dc").exists()  # nothing started


def _powers(text: str) -> tuple[int, ...]:
    lo, hi = (int(x) for x in text.split(".."))
    out = []
    b = lo
    while b <= hi:
        out.append(b)
        b *= 2
    return tuple(out)


def test_full_scale_batch_sizes_are_the_projects() -> None:
    """The profile at undercap.profile.DEFAULT_BATCH_SIZES, the estimates at the benchmarks'."""
    from undercap.profile import DEFAULT_BATCH_SIZES

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        matrix_data = _load("matrix_data", REPO / "benchmarks" / "matrix_data.py")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    text = SCRIPT.read_text()

    def value(name: str) -> str:
        m = re.search(rf'^{name}="([^"]+)"$', text, re.M)
        assert m, name
        return m.group(1)

    assert _powers(value("PROFILE_BS")) == tuple(DEFAULT_BATCH_SIZES)
    assert _powers(value("IMAGE_BS")) == tuple(matrix_data.MODALITIES["image"].batch_sizes)
    assert _powers(value("TEXT_BS")) == tuple(matrix_data.MODALITIES["text"].batch_sizes)


def test_the_check_never_asks_for_control() -> None:
    """Read-only always: no clock control, no power limit set, nvidia-smi only queried."""
    code = "\n".join(
        ln for ln in SCRIPT.read_text().splitlines() if not ln.lstrip().startswith("#")
    )
    assert "--allow-clock-control" not in code
    assert not re.search(
        r"nvidia-smi[^\n]*\s(-pl|--power-limit|-lgc|--lock-gpu-clocks|-ac)\b", code
    )
    for cmd in ("profile", "run"):
        assert re.search(rf'"\$\{{UC\[@\]\}}" {cmd} --device "\$DEVICE" --read-only', code), cmd


# --- the helper on what the H200 really produced ------------------------------------------


def _h200(shared_data: Path) -> Path:
    h = shared_data / "measured" / "nvidia-h200"
    if not (h / "profile-resnet18.json").is_file():
        pytest.skip(f"no H200 measurements at {h}")
    return h


def test_summary_of_the_h200_measurements(tmp_path: Path, shared_data: Path) -> None:
    h = _h200(shared_data)
    work = tmp_path / "work"
    logs = work / "logs"
    (work / "run").mkdir(parents=True)
    logs.mkdir()
    shutil.copy(h / "profile-resnet18.json", work)
    shutil.copy(h / "eff-resnet18-cifarq.json", work)
    shutil.copy(h / "train128.json", work / "run" / "train.json")
    shutil.copy(h / "run.log", logs / "run.log")
    shutil.copy(h / "pytest.log", logs / "pytest.log")
    shutil.copy(h / "nvidia-smi.csv", logs / "nvidia-smi.csv")
    shutil.copy(h / "smi-trace-run1.csv", logs / "smi-trace.csv")
    (logs / "estimate-mobilenetv2.log").write_text("")
    (work / "env.txt").write_text("mode: full\ndevice: nvml:0\ncap: 639.4 W\n")
    tsv = [
        ("nvidia-smi", 0, 10.0, 10.4, 15, "nvidia-smi.csv", ""),
        ("profile", 0, 11.0, 23.3, 40, "profile.log", ""),
        ("estimate-resnet18", 0, 24.0, 131.0, 190, "estimate-resnet18.log", ""),
        ("estimate-mobilenetv2", 124, 131.0, 171.0, 40, "estimate-mobilenetv2.log", ""),
        ("run", 1, 171.0, 190.5, 60, "run.log", ""),
        ("tests", 1, 191.0, 271.0, 100, "pytest.log", ""),
        ("devices", "", "", "", 20, "", "skipped: the total budget (270 s) is spent"),
    ]
    (work / "stages.tsv").write_text("".join("\t".join(str(x) for x in row) + "\n" for row in tsv))
    out = tmp_path / "out"
    assert summary.main(["summarize", "--work", str(work), "--out", str(out)]) == 1
    records = _records(out)
    by = {r["stage"]: r for r in records}
    assert by["nvidia-smi"]["numbers"]["gpu"] == "NVIDIA H200"
    assert by["nvidia-smi"]["numbers"]["trace_max_w"] == pytest.approx(564.24)
    assert by["profile"]["numbers"]["rows"] == 6
    assert "205.4..620.5 W" in by["profile"]["key"]
    assert by["estimate-resnet18"]["numbers"]["N_b"]["32"] == 22848
    assert by["estimate-mobilenetv2"]["status"] == "timeout"
    assert by["estimate-mobilenetv2"]["error"] == "out of time after 40 s"
    assert by["run"]["error"].startswith("error: nvml:0 is read-only here")
    assert by["run"]["numbers"]["batch_size"] == 128  # from the log's "selected" line
    assert by["run"]["numbers"]["max_raw_power_w"] == pytest.approx(483.11)
    assert by["tests"]["numbers"]["passed"] == 636 and by["tests"]["numbers"]["failed"] == 3
    assert by["devices"]["status"] == "skipped"
    assert sorted(f.name for f in out.iterdir()) == [
        "eff-resnet18-cifarq.json",
        "profile-resnet18.json",
        "summary.json",
        "summary.md",
    ]
    rows = _table_rows(out)
    assert rows["estimate-mobilenetv2"][1] == "124" and rows["run"][1] == "1"


def test_cap_binds_the_profile(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = _h200(shared_data)
    assert summary.main(["cap", str(h / "profile-resnet18.json")]) == 0
    cap = float(capsys.readouterr().out)
    rows = json.loads((h / "profile-resnet18.json").read_text())["rows"]
    need = [r["peak_power_w"] + r["peak_margin_w"] for r in rows]
    assert 0 < sum(n <= cap for n in need) < len(need)  # some batch sizes fit, not all
    assert summary.main(["cap", str(h / "missing.json")]) == 1
