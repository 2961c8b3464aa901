"""Faults users meet, across `train`, `run`, `profile` and the readers: a cap that never
silently disappears, waits that sleep and end, refusals before anything changes, one
line for every file error, one run per folder, exit 4's advice that works, readings no
sensor gives. Each test failed on the code before these were fixed."""

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from undercap.cli import main

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
QUICK = "--dataset digits --limit 400 --target-accuracy 0.8 --max-samples 3000 --no-progress"
TRAIN = ["train", "--device", "sim:jetson-nano", "--model", "small-cnn", "--torch-device", "cpu"]


def selection(tmp_path: Path, limit_w: float = 3.5) -> Path:
    """A selection at b=64, 768 MHz under `limit_w` (the demo's on the simulated Nano)."""
    sel = {"batch_size": 64, "freq_mhz": 768.0, "power_limit_w": limit_w,
           "model": "small-cnn", "peak_power_w": 3.36}  # fmt: skip
    path = tmp_path / "sel.json"
    path.write_text(json.dumps(sel))
    return path


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def cli(*args: str, **popen) -> Tuple[int, str, str]:
    p = subprocess.run(  # noqa: UP022 - Python 3.6 (the JetPack 4.6 floor) runs it
        [sys.executable, "-m", "undercap.cli", *args],
        cwd=popen.pop("cwd", REPO),
        env={**ENV, **popen.pop("env", {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,  # noqa: UP021
        timeout=popen.pop("timeout", 240),
        **popen,
    )
    return p.returncode, p.stdout, p.stderr


# --- 1. a cap source that cannot be read ---------------------------------------------------
@pytest.mark.parametrize("content", [None, "abc", "-3", "nan", b"\x80\x81"])
def test_an_unreadable_power_source_is_an_error_before_any_work(tmp_path, capsys, content):
    """Missing, not a number, negative, undecodable: exit 2, one line, no result file
    (it trained with power_limit_w null before: the selection's cap silently gone)."""
    src = tmp_path / "cap.txt"
    if isinstance(content, bytes):
        src.write_bytes(content)
    elif content is not None:
        src.write_text(content)
    out = tmp_path / "t.json"
    args = [*TRAIN, "--from-selection", str(selection(tmp_path)), *QUICK.split()]
    assert main([*args, "--power-source", str(src), "-o", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "power source" in line and str(src) in line
    assert not out.exists()


def test_a_live_source_gone_bad_holds_its_last_limit_and_says_so(tmp_path, capsys):
    """During a run: missing or garbled, the last limit read holds (never no cap), one
    warning each time the file goes bad, and the result carries them."""
    from undercap.data.spec import DataSpec, load_splits
    from undercap.devices import open_device
    from undercap.train import TrainSpec, train
    from undercap.train.cap import LiveSource
    from undercap.train.session.follow import reselector_for

    src = tmp_path / "cap.txt"
    src.write_text("4.0\n")
    live = LiveSource(src, poll_s=0.01)
    assert live.limit_at(0.0) == 4.0
    src.write_text("4.2 W?")
    assert live.limit_at(0.02) == 4.0 and live.limit_at(0.04) == 4.0  # one warning, held
    src.write_text("3.9")
    assert live.limit_at(0.06) == 3.9
    src.unlink()
    assert live.limit_at(0.08) == 3.9 and len(live.notes) == 2
    assert "holding the last limit read (4 W)" in live.notes[0]
    assert capsys.readouterr().err.count("warning: power source") == 2

    # a run whose live source vanished after it started: its result says so
    src.write_text("4.0\n")
    live = LiveSource(src, poll_s=0.01)
    src.unlink()
    profile, eff = _profile_and_efficiency(tmp_path)
    spec = TrainSpec(model="small-cnn", batch_size=64, target_accuracy=0.5, cap=live,
                     max_samples=512, eval_every_samples=256, torch_device="cpu")  # fmt: skip
    data = load_splits(DataSpec("digits", limit=400))
    with open_device("sim:jetson-nano") as device:
        res = train(device, spec, data, reselector=reselector_for(profile, eff))
    assert {s["power_limit_w"] for s in res.segments} == {4.0}
    assert any("does not exist" in w and "holding" in w for w in res.warnings)


def _profile_and_efficiency(tmp_path: Path):
    """A profile of the small CNN at b=16 and 64 on the simulated Nano, and an r(b)."""
    from undercap.artifacts.efficiency import Efficiency
    from undercap.devices import open_device
    from undercap.profile import run_profile

    with open_device("sim:jetson-nano") as device:
        profile = run_profile(device, "small-cnn", (1, 8, 8), [16, 64], num_classes=10,
                              progress=False)  # fmt: skip
    eff = Efficiency.from_dict(
        {
            "schema": "undercap.efficiency/1", "model": "small-cnn", "dataset": "digits",
            "target_accuracy": 0.5, "samples_to_target": {"16": [300], "64": [600]},
            "relative": {"16": 0.5, "64": 1.0},
        }
    )  # fmt: skip
    return profile, eff


# --- 2. waiting for power ------------------------------------------------------------------
@pytest.mark.server  # capped(): the user-loop API
def test_waiting_for_power_sleeps_says_so_and_gives_up(tmp_path, capsys):
    """A live cap under which nothing runs: the wait sleeps (a fraction of a core, not
    100%), one line says what it waits for, and past max_wait_s it stops with
    PowerWaitError (exit 4) instead of waiting without end."""
    import undercap
    from undercap.errors import EXIT_CAP_EXCEEDED, PowerWaitError
    from undercap.train.cap import LiveSource

    (tmp_path / "cap.txt").write_text("1.0\n")
    live = LiveSource(tmp_path / "cap.txt", poll_s=0.25, max_wait_s=1.5)
    profile, eff = _profile_and_efficiency(tmp_path)
    wall0, cpu0 = time.monotonic(), time.process_time()
    with pytest.raises(PowerWaitError) as e, undercap.open_device("sim:jetson-nano") as device:
        cap = undercap.capped(device, profile=profile, relative=eff.relative,
                              power_schedule=live, workload=_workload())  # fmt: skip
        with cap:
            pytest.fail("trained under a cap no configuration fits")
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    assert wall >= 1.5 and cpu < 0.5 * wall, (wall, cpu)
    assert e.value.exit_code == EXIT_CAP_EXCEEDED and "--max-wait-s" in str(e.value)
    err = capsys.readouterr().err
    assert "waiting for power" in err and "1 W" in err and "every 0.25 s" in err


def _workload():
    from undercap.artifacts.workload import Workload

    return Workload("resnet18", (3, 32, 32), 3.329e9, 4.70e6, 43.0e6, 11_173_962, 297)


def test_a_wait_beyond_the_bound_exits_4_checkpointed_and_resumes(tmp_path):
    """A schedule that cuts the power for 5000 s under --max-wait-s 100: exit 4 with a
    checkpoint and advice that works; resumed with a longer bound it ends as the
    uninterrupted run does (the same time to accuracy, the same segments)."""
    from undercap.artifacts import save_efficiency, save_profile

    sched = tmp_path / "drop.csv"
    sched.write_text("time_s,power_limit_w\n0,4\n0.2,0\n5000,4\n")
    profile, eff = _profile_and_efficiency(tmp_path)
    save_profile(tmp_path / "profile.json", profile)
    save_efficiency(tmp_path / "efficiency.json", eff)
    args = [*TRAIN, "--from-selection", str(selection(tmp_path)), *QUICK.split(),
            "--power-schedule", str(sched)]  # fmt: skip
    ck, out, whole = tmp_path / "ck", tmp_path / "t.json", tmp_path / "whole.json"
    rc, _, err = cli(*args, "--max-wait-s", "100", "--checkpoint-dir", str(ck), "-o", str(out))
    assert rc == 4 and (ck / "checkpoint.pt").is_file() and not out.exists()
    line = one_error_line(err)
    assert "until 5000 s" in line and "--max-wait-s 100 s" in line and "--resume" in line
    rc, _, _ = cli(*args, "--max-wait-s", "6000", "--checkpoint-dir", str(ck), "--resume",
                   "-o", str(out))  # fmt: skip
    assert rc == 0
    assert cli(*args, "--max-wait-s", "6000", "-o", str(whole))[0] == 0
    a, b = json.loads(out.read_text()), json.loads(whole.read_text())
    assert a["time_to_accuracy_s"] == pytest.approx(b["time_to_accuracy_s"], rel=1e-9)
    assert [s["power_limit_w"] for s in a["segments"]] == [4.0, 0.0, 4.0]
    assert [s["power_limit_w"] for s in b["segments"]] == [4.0, 0.0, 4.0]


# --- 3. refusals before anything changes ---------------------------------------------------
def _run_args(cache: Path, *extra: str) -> List[str]:
    return [
        "run", "--device", "sim:jetson-nano", "--model", "small-cnn", "--batch-sizes", "16,64",
        "--max-samples", "1500", "--eval-every", "128", "--torch-device", "cpu",
        "--no-progress", "--proxy", "digits", "--proxy-limit", "300", "--target", "digits",
        "--target-limit", "600", "--target-accuracy", "0.6", "--estimate-seeds", "1",
        "--cache-dir", str(cache), *extra,
    ]  # fmt: skip


@pytest.mark.server  # `run`
def test_run_into_another_runs_folder_is_refused_before_it_writes(tmp_path, capsys):
    """A second `run` into a folder with another cap: refused (another selection's
    training is checkpointed there) with every file as it was; before, it had already
    overwritten selection.json when it refused."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    assert main([*_run_args(cache), "--power-limit", "4", "-o", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main([*_run_args(cache), "--power-limit", "3.3", "-o", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "another -o folder" in line or "new -o folder" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("command", ["train", "profile"])
def test_an_output_that_cannot_be_made_is_refused_before_the_work(tmp_path, capsys, command):
    """-o under a regular file, or a folder where a file goes: one line at once (it
    failed with FileExistsError / NotADirectoryError after all the work before)."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    base = {
        "train": [*TRAIN, "--batch-size", "16", *QUICK.split()],
        "profile": [
            "profile",
            "--device",
            "sim:jetson-nano",
            "--model",
            "small-cnn",
            "--no-progress",
        ],  # fmt: skip
    }[command]
    for out, says in ((tmp_path / "afile" / "x.json", "is a file"), (tmp_path / "adir", "folder")):
        t0 = time.monotonic()
        assert main([*base, "-o", str(out)]) == 2
        assert says in one_error_line(capsys.readouterr().err)
        assert time.monotonic() - t0 < 5  # before the work, not after it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_a_checkpoint_folder_of_another_run_is_refused_and_left_as_it_was(tmp_path, capsys):
    ck = tmp_path / "ck"
    args = [
        *TRAIN,
        *QUICK.split(),
        "--checkpoint-dir",
        str(ck),
        "--eval-log",
        str(tmp_path / "e.csv"),
    ]
    assert main([*args, "--batch-size", "16"]) == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main([*args, "--batch-size", "32", "--resume"]) == 2
    assert "different run" in one_error_line(capsys.readouterr().err)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


# --- 4. one line for every file error ------------------------------------------------------
def _limited_size(max_bytes: int):
    """A child whose files may not grow past `max_bytes` (EFBIG, as on a capped disk)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE")
def test_a_write_the_disk_refuses_is_one_line_and_keeps_the_old_file(tmp_path):
    """File too large for the result JSON and for torch.save's checkpoint: exit 2, one
    line naming the file; the earlier result stays whole."""
    out = tmp_path / "t.json"
    out.write_text('{"earlier": true}\n')
    args = [*TRAIN, "--batch-size", "16", *QUICK.split(), "-o", str(out)]
    rc, _, err = cli(*args, preexec_fn=_limited_size(512))
    assert rc == 2 and "File too large" in one_error_line(err) and str(out) in err
    assert json.loads(out.read_text()) == {"earlier": True}
    ck = tmp_path / "ck"
    rc, _, err = cli(*args, "--checkpoint-dir", str(ck), preexec_fn=_limited_size(20_000))
    line = one_error_line(err)
    assert rc == 2 and "checkpoint.pt" in line and "File too large" in line
    assert json.loads(out.read_text()) == {"earlier": True}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig", "utf-32"])
def test_inputs_saved_with_a_byte_order_mark_read_as_text(tmp_path, encoding):
    """A selection and a schedule saved by a Windows editor (UTF-16 with a mark, UTF-8
    with a BOM): read as text (a UnicodeDecodeError traceback before)."""
    from undercap.artifacts.selection import load_selection
    from undercap.train.cap import load_schedule

    sel = selection(tmp_path)
    sel.write_bytes(sel.read_text().encode(encoding))
    assert load_selection(sel).batch_size == 64
    sched = tmp_path / "s.csv"
    sched.write_bytes("time_s,power_limit_w\n0,5\n10,none\n".encode(encoding))
    assert load_schedule(sched).limits_w == (5.0, None)


def test_text_in_another_encoding_is_one_line(tmp_path, capsys):
    sel = selection(tmp_path)
    sel.write_bytes(sel.read_text().replace('"small-cnn"', '"sm\u00e4ll"').encode("latin-1"))
    sched = tmp_path / "s.csv"
    sched.write_bytes("time_s,power_limit_w\n0,5 \u00b0\n".encode("latin-1"))
    for flags in (
        ["--from-selection", str(sel)],
        ["--batch-size", "16", "--power-schedule", str(sched)],
    ):
        assert main([*TRAIN, *QUICK.split(), *flags]) == 2
        assert "not UTF-8 text" in one_error_line(capsys.readouterr().err)


# --- 5. one run per folder -----------------------------------------------------------------
@pytest.mark.server  # `run`
def test_a_second_run_into_a_held_folder_is_one_line(tmp_path, capsys):
    """A folder another undercap command holds: one line naming its pid, nothing
    written; a holder killed with SIGKILL leaves no stuck lock."""
    from undercap.artifacts.io import LOCK_NAME, folder_lock

    out = tmp_path / "run"
    with folder_lock(out):
        assert main([*_run_args(tmp_path / "cache"), "--power-limit", "4", "-o", str(out)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert f"pid {os.getpid()}" in line and "in use" in line
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
    assert not out.exists()  # the lock's own folder goes with it, when nothing else came
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from undercap.artifacts.io import folder_lock\n"
         "with folder_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)",
         str(out)],
        stdout=subprocess.PIPE, universal_newlines=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(Exception, match=f"pid {holder.pid}"), folder_lock(out):
        pass
    holder.kill()
    holder.wait()
    with folder_lock(out):  # the kernel dropped the dead holder's lock
        pass


# --- 6. exit 4's advice --------------------------------------------------------------------
def test_exit_4_advice_works_resume_under_a_raised_cap(tmp_path):
    """Over the cap at the lowest clock: exit 4 after a checkpoint, and the advice
    (--resume with a higher --power-limit) goes on from there: the cap is a setting of
    the run, not of its identity. The result splits the run at the new cap."""
    sel = selection(tmp_path)
    ck, out = tmp_path / "ck", tmp_path / "t.json"
    args = [*TRAIN, "--from-selection", str(sel), *QUICK.split(), "--guard-window-s", "0.02",
            "--checkpoint-dir", str(ck), "-o", str(out)]  # fmt: skip
    rc, _, err = cli(*args, "--power-limit", "1.6")
    assert rc == 4 and "--resume and a higher --power-limit" in one_error_line(err)
    rc, _, err = cli(*args, "--power-limit", "3.6", "--resume")
    assert rc == 0, err
    res = json.loads(out.read_text())
    assert res["power_limit_w"] == 3.6 and res["reached"]
    assert [s["power_limit_w"] for s in res["segments"]] == [1.6, 3.6]
    assert any("resumed at" in w and "1.6 W" in w for w in res["warnings"])
    assert res["freq_mhz_start"] == 768.0


# --- 7. readings no sensor gives -----------------------------------------------------------
def test_negative_rail_readings_are_refused_not_profiled(tmp_path, capsys):
    """A Jetson rail reading -5 mW: no profile with peak_power_w -0.005 (which
    plot-profile then refused); one line, no file."""
    from fakes.sysfs import build_nano

    tree = build_nano(tmp_path / "nano")
    for files in tree.rail_files.values():
        os.chmod(files["power"], 0o644)
        files["power"].write_text("-5\n")
    out = tmp_path / "p.json"
    args = ["profile", "--device", "jetson", "--sysfs-root", str(tree.root), "--read-only",
            "--model", "small-cnn", "--batch-sizes", "8", "--no-progress", "-o", str(out)]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "power readings" in one_error_line(err) and "-0.005 W" in err
    assert not out.exists()


def test_implausible_readings_are_set_aside_with_one_warning(capsys):
    from undercap.devices.sampler import PowerSampler

    class Flaky:
        name, is_simulated = "flaky-sensor", False
        readings = iter([5.0, -1.0, float("nan"), 5.0, 9e9] + [5.0] * 1000)

        def power_w(self) -> float:
            return next(self.readings)

        def now_s(self) -> float:
            return time.monotonic()

        def energy_j(self):
            return None

    with PowerSampler(Flaky(), rate_hz=200) as s:
        time.sleep(0.1)
    assert s.stats().peak_w == 5.0 and s._impl.set_aside == 3
    assert capsys.readouterr().err.count("set aside a power reading") == 1


def test_an_artifact_undercap_would_refuse_is_never_written(tmp_path):
    from undercap.artifacts.profile import Profile, ProfileRow, load_profile, save_profile
    from undercap.errors import ArtifactError

    row = ProfileRow(batch_size=8, freq_mhz=921.6, time_per_sample_s=1e-4, peak_power_w=3.0,
                     mean_power_w=2.9)  # fmt: skip
    good = Profile(device={"name": "x"}, model="small-cnn", input_shape=(1, 8, 8), rows=(row,))
    path = save_profile(tmp_path / "p.json", good)
    bad = Profile(device={"name": "x"}, model="small-cnn", input_shape=(1, 8, 8),
                  rows=(ProfileRow(8, 921.6, 1e-4, -0.005, 2.9),))  # fmt: skip
    with pytest.raises(ArtifactError, match="refusing to write .*peak_power_w"):
        save_profile(path, bad)
    assert load_profile(path) == good


# --- small ones ----------------------------------------------------------------------------
def test_eval_log_starts_over_on_a_fresh_run_and_keeps_its_rows_on_resume(tmp_path):
    from undercap.train.evallog import EvalLog

    log = tmp_path / "e.csv"
    log.write_text("samples,accuracy\n1,0.1\n")  # an earlier run's
    for fresh in (True, False):
        row = {"samples": 64, "accuracy": 0.5}
        el = EvalLog.open(log, resumed_at=None if fresh else 64)
        el.write(row)
        el.write({**row, "samples": 128})
        el.close()
    lines = log.read_text().splitlines()
    # fresh: the earlier run's row is gone; resumed at 64: the row at 128 is trained again
    assert [ln.split(",")[0] for ln in lines] == ["samples", "64", "64", "128"]


def test_artifacts_follow_the_users_umask(tmp_path):
    from undercap.artifacts.io import save_json

    old = os.umask(0o022)
    try:
        path = save_json(tmp_path / "a.json", {"x": 1})
        assert path.stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        assert save_json(tmp_path / "b.json", {"x": 1}).stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
