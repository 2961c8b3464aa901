"""`undercap devices` and `undercap restore` on fake trees and a fake NVML."""

import json
import os
import sys
from pathlib import Path
from typing import List

import pytest
from fakes import pynvml as fake
from fakes.sysfs import build_nano, build_orin_nano

from undercap._compat import run_captured
from undercap.cli import main
from undercap.devices import simulated_names

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_real_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see the fake NVML only (the host may or may not have a GPU)."""
    monkeypatch.delenv("UNDERCAP_STATE_DIR", raising=False)
    fake.reset([])
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> List[dict]:
    assert main(["devices", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_identifies_nano_tree(tmp_path: Path, capsys) -> None:
    build_nano(tmp_path)
    infos = run_json(capsys, "--sysfs-root", str(tmp_path))
    assert [i["name"] for i in infos if i["is_simulated"]] == simulated_names()
    (jet,) = [i for i in infos if i["backend"] == "jetson"]
    assert jet["details"]["board"] == "NVIDIA Jetson Nano Developer Kit"
    assert jet["details"]["devfreq_node"] == "57000000.gpu"
    assert jet["freqs_mhz"] == [76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6, 614.4, 691.2,
                                768.0, 844.8, 921.6]  # fmt: skip
    assert jet["power_sensors"] == ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]
    assert jet["details"]["power"]["gpu_rail"] == "POM_5V_GPU"
    assert jet["is_simulated"] is False and jet["control_permitted"] is True


def test_identifies_orin_tree(tmp_path: Path, capsys) -> None:
    build_orin_nano(tmp_path)
    infos = run_json(capsys, "--sysfs-root", str(tmp_path), "--no-nvml")
    (jet,) = [i for i in infos if i["backend"] == "jetson"]
    assert jet["details"]["board"] == "NVIDIA Jetson Orin Nano Developer Kit"
    assert jet["details"]["devfreq_node"] == "17000000.gpu"
    assert jet["freqs_mhz"] == [306.0, 408.0, 510.0, 612.0, 714.0, 816.0, 918.0, 1020.0]
    assert jet["power_sensors"] == ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]
    assert jet["details"]["power"]["total_rail"] == "VDD_IN"
    assert jet["details"]["nvpmodel"]["mode_name"] == "MAXN_SUPER"


def test_plain_table(tmp_path: Path, capsys) -> None:
    build_nano(tmp_path, nvpmodel_mode=1)
    assert main(["devices", "--sysfs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["NAME", "BACKEND", "FREQUENCIES"]
    assert "jetson: NVIDIA Jetson Nano Developer Kit, L4T R32.7.1" in out
    assert "mode 1 5W (GPU MAX_FREQ 640 MHz in its conf" in out
    assert "power mode allows: 76.8 .. 614.4 MHz (ceiling: kernel max_freq" in out
    assert "76.8 .. 614.4 (8 steps)" in out  # the 5W mode's steps
    assert "SIMULATED" in out


def test_bad_sysfs_root_is_one_line_error(tmp_path: Path, capsys) -> None:
    assert main(["devices", "--sysfs-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no Jetson GPU devfreq node") and "\n" not in err


def test_nvml_listing(tmp_path: Path, capsys) -> None:
    fake.reset([fake.FakeGpu()])
    infos = run_json(capsys, "--nvml")
    (gpu,) = [i for i in infos if i["backend"] == "nvml"]
    assert gpu["name"] == "nvml:0" and gpu["freqs_mhz"][-1] == 1980.0
    assert gpu["details"]["power_limit_constraints_w"] == [200.0, 700.0]
    assert gpu["control_permitted"] is False


def test_nvml_unavailable(capsys) -> None:
    fake.reset(library=False)
    infos = run_json(capsys)  # auto: skipped quietly in JSON
    assert all(i["backend"] != "nvml" for i in infos)
    assert main(["devices"]) == 0
    assert "nvml: not available" in capsys.readouterr().out
    assert main(["devices", "--nvml"]) == 2  # asked for explicitly: an error
    assert "install the NVIDIA driver" in capsys.readouterr().err


def test_devices_does_not_import_torch(tmp_path: Path) -> None:
    build_orin_nano(tmp_path)
    code = (
        "import sys; from undercap.cli import main; "
        f"rc = main(['devices', '--json', '--sysfs-root', {str(tmp_path)!r}]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = run_captured([sys.executable, "-c", code], env=env)  # capture_output: 3.7+
    assert out.returncode == 0, out.stderr
    assert any(i["backend"] == "jetson" for i in json.loads(out.stdout))


def test_restore_with_nothing_to_do(tmp_path: Path, capsys) -> None:
    build_nano(tmp_path)
    assert main(["restore", "--device", "jetson", "--sysfs-root", str(tmp_path)]) == 0
    assert "nothing to restore" in capsys.readouterr().out
    assert main(["restore", "--sysfs-root", str(tmp_path)]) == 0
    assert main(["restore", "--state-file", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
