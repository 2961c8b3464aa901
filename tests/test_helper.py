"""undercap-helper (undercap/helper/): a real helper process on a real Unix socket over a
fake Jetson tree, and real client processes. A client killed with SIGKILL leaves the
clock locked for under a second; the helper's SIGTERM and a killed helper's next start
put it back too; callers outside the group, devices not named at start, a second client
and 1,000 malformed requests change nothing. Tests that need a second uid (the group's
file permissions) run as root and use `nobody`; elsewhere they skip."""

import contextlib
import grp
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List

import pytest
from fakes.sysfs import FakeTree, build_nano

from undercap._compat import run_captured
from undercap.devices.helper.protocol import DEFAULT_SOCKET, MAX_LINE_BYTES

NOBODY = 65534
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


class Helper:
    """An undercap-helper process serving `jetson` on the fake tree."""

    def __init__(self, folder: Path, tree: FakeTree, group: str = MY_GROUP) -> None:
        self.folder, self.tree, self.group = folder, tree, group
        self.socket = str(folder / "h.sock")
        self.log = folder / "helper.log"
        self.proc = None  # type: Optional[subprocess.Popen]

    def start(self, *extra: str) -> "Helper":
        cmd = [sys.executable, "-m", "undercap.devices.helper.cli", "serve", "--socket", self.socket,
               "--group", self.group, "--device", "jetson", "--sysfs-root", str(self.tree.root),
               *extra]  # fmt: skip
        env = dict(os.environ, UNDERCAP_STATE_DIR=str(self.folder / "state"))
        with open(str(self.log), "ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stderr=log, stdout=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            with contextlib.suppress(OSError):
                call(self.socket, {"op": "hello"})
                return self
            time.sleep(0.05)
        raise AssertionError("the helper did not start: " + self.log.read_text())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        return self.proc.wait(30)


def call(path: str, request: dict) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(json.dumps(request).encode() + b"\n")
        return json.loads(s.makefile("rb").readline())


@pytest.fixture
def folder() -> Iterator[Path]:
    """A short path (a Unix socket's is at most 107 bytes), traversable by `nobody`."""
    path = Path(tempfile.mkdtemp(prefix="uch-", dir="/tmp"))
    os.chmod(str(path), 0o755)
    yield path
    shutil.rmtree(str(path), ignore_errors=True)


@pytest.fixture
def helper(folder: Path) -> Iterator[Helper]:
    h = Helper(folder, build_nano(folder / "nano")).start()
    yield h
    h.stop()


CLIENT = """
import sys, time
from undercap.devices.helper.client import HelperClient
c = HelperClient(sys.argv[1])
c.call("acquire", device="jetson")
c.call("lock", device="jetson", freq_mhz=float(sys.argv[2]))
print("locked", flush=True)
time.sleep(600)
"""


def locking_client(h: Helper, freq_mhz: float = 614.4, **kw) -> subprocess.Popen:
    """A client process that locks the clock and sleeps, once it has said so."""
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, h.socket, str(freq_mhz)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, **kw)  # fmt: skip
    line = proc.stdout.readline()
    assert line.strip() == "locked", proc.stderr.read()
    return proc


def restored_within(tree: FakeTree, before: dict, seconds: float) -> float:
    t0 = time.monotonic()
    while tree.settings() != before:
        if time.monotonic() - t0 > seconds:
            raise AssertionError(f"not restored after {seconds} s: {tree.settings()}")
        time.sleep(0.002)
    return time.monotonic() - t0


def test_sigkill_of_a_client_restores_within_a_second_20_of_20(helper: Helper) -> None:
    before = helper.tree.settings()
    times = []
    for _ in range(20):
        client = locking_client(helper)
        locked = helper.tree.settings()
        assert locked["min_freq"] == locked["max_freq"] == "614400000"
        assert locked["railgate_enable"] == "0"
        client.kill()
        client.wait()
        times.append(restored_within(helper.tree, before, 1.0))
    assert len(times) == 20 and max(times) < 1.0
    # the helper removes a client's state file just after putting its settings back
    assert _gone(lambda: list((helper.folder / "state").glob("state-*.json")), 2.0)
    assert call(helper.socket, {"op": "hello"})["ok"]


def _gone(found: Callable[[], list], within_s: float) -> bool:
    """Whether `found()` is empty within `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while found() and time.monotonic() < deadline:
        time.sleep(0.01)
    return not found()


def _hammer(path: str, done: threading.Event) -> None:
    """Status requests back to back until `done` (or the helper is gone)."""
    with contextlib.suppress(OSError, ValueError):
        while not done.is_set():
            call(path, {"op": "status"})


def test_a_sigterm_during_requests_still_stops_the_helper(folder: Path) -> None:
    """The signal lands while a request is being answered (its handler caught every
    Exception once, the stop with it: the helper served on, CI saw it hang)."""
    tree = build_nano(folder / "nano")
    for attempt in range(8):
        h = Helper(folder, tree).start()
        done = threading.Event()

        threads = [threading.Thread(target=_hammer, args=(h.socket, done)) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.05 + 0.02 * attempt)
        try:
            assert h.stop(signal.SIGTERM) == 0, h.log.read_text()
        finally:
            done.set()
            for t in threads:
                t.join()
    assert "internal error" not in h.log.read_text()


def test_the_helpers_own_sigterm_restores(helper: Helper) -> None:
    before = helper.tree.settings()
    client = locking_client(helper)
    assert helper.stop(signal.SIGTERM) == 0
    assert helper.tree.settings() == before
    assert not os.path.exists(helper.socket)
    assert "putting every device back" in helper.log.read_text()
    client.kill()


def test_a_killed_helper_restores_at_its_next_start(helper: Helper) -> None:
    before = helper.tree.settings()
    client = locking_client(helper)
    helper.stop(signal.SIGKILL)
    client.kill()
    assert helper.tree.settings() != before  # nobody left to put it back
    assert list((helper.folder / "state").glob("state-*.json"))
    helper.start()
    assert helper.tree.settings() == before
    assert "restored the settings left by pid" in helper.log.read_text()


def test_one_client_per_device_and_only_devices_named_at_start(helper: Helper) -> None:
    from undercap.devices.helper.client import HelperClient
    from undercap.errors import DeviceError

    client = locking_client(helper)
    second = HelperClient(helper.socket)
    with pytest.raises(DeviceError, match=r"jetson is controlled by another client, uid \d+ \(pid"):
        second.call("acquire", device="jetson")
    with pytest.raises(
        DeviceError, match=r"device 'nvml:0' is not served here; the helper serves jetson"
    ):
        second.call("acquire", device="nvml:0")
    with pytest.raises(DeviceError, match="acquire jetson first"):
        second.call("lock", device="jetson", freq_mhz=921.6)
    second.close()
    client.kill()


def test_a_frequency_off_the_table_is_refused_and_changes_nothing(helper: Helper) -> None:
    from undercap.devices.helper.client import HelperClient
    from undercap.errors import DeviceError

    before = helper.tree.settings()
    c = HelperClient(helper.socket)
    c.call("acquire", device="jetson")
    for bad in (600.0, -1, "921.6", True, None, 1e308):
        with pytest.raises(DeviceError, match="MHz"):
            c.call("lock", device="jetson", freq_mhz=bad)
    assert helper.tree.settings() == before
    c.close()


def _malformed(rng: random.Random) -> bytes:
    """One line a buggy or hostile client might send."""
    ops = ["hello", "status", "acquire", "lock", "release", "LOCK", "", None, 3, ["lock"]]
    devices = ["jetson", "nvml:0", "", None, 7, {"a": 1}, "jetson\n", "../etc"]
    freqs = [614.4, 921.6, 76.8, 0, -5, 1e309, "614.4", None, [1], True, 12345.6]
    kind = rng.randrange(7)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b"")
    if kind == 1:
        return b"x" * (MAX_LINE_BYTES + rng.randrange(1, 5000))  # oversized
    if kind == 2:
        return json.dumps([rng.random() for _ in range(5)]).encode()
    if kind == 3:
        return b'{"op": "lock", "device": "jetson", "freq_mhz": NaN}'
    if kind == 4:
        return b"\xff\xfe" + json.dumps({"op": "hello"}).encode("utf-16-le")
    request = {"op": rng.choice(ops), "device": rng.choice(devices), "freq_mhz": rng.choice(freqs)}
    for _ in range(rng.randrange(3)):
        request.pop(rng.choice(list(request)), None)
    return json.dumps(request).encode()


def test_a_thousand_malformed_requests_leave_it_serving_and_every_device_unchanged(
    helper: Helper,
) -> None:
    before = helper.tree.settings()
    rng = random.Random(54)
    sent, refused, s = 0, 0, None
    while sent < 1000:
        if s is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(helper.socket)
            reader = s.makefile("rb")
        try:
            s.sendall(_malformed(rng) + b"\n")
            line = reader.readline()
        except ConnectionError:  # closed on an oversized line before its answer was read
            line = b""
        sent += 1
        answer = json.loads(line) if line else {"ok": False}
        refused += not answer["ok"]
        if not line or rng.random() < 0.05:  # closed by the helper, or by us mid-session
            s.close()
            s = None
            assert restored_within(helper.tree, before, 1.0) < 1.0
    if s is not None:
        s.close()
    assert restored_within(helper.tree, before, 1.0) < 1.0
    assert refused > 900  # a few random requests are well-formed (hello, status)
    assert helper.proc.poll() is None and call(helper.socket, {"op": "hello"})["ok"]
    assert "Traceback" not in helper.log.read_text()


def as_nobody(fn: Callable[[], str]) -> str:
    """fn() in a forked child running as `nobody` (no groups), its result or its error.
    A fork, not a new interpreter: nobody may not read the interpreter's home here."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root, run, report, and leave without pytest's atexit
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = f"{type(e).__name__}: {e}"
        os.write(write_end, out.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as r:
        out = r.read().decode()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(not ROOT, reason="needs a second uid: runs as root, the caller as nobody")
def test_a_caller_outside_the_group_cannot_connect(helper: Helper) -> None:
    """The socket is 0660 root:<group>: the kernel refuses nobody's connect()."""
    from undercap.devices.helper.client import HelperClient

    out = as_nobody(lambda: str(HelperClient(helper.socket).call("hello")))
    assert out.startswith("DevicePermissionError: cannot connect to undercap-helper")
    assert "permission denied; ask the admin to add you to the helper's group" in out
    assert oct(os.stat(helper.socket).st_mode & 0o777) == "0o660"


@pytest.mark.skipif(not ROOT, reason="needs a second uid: runs as root, the caller as nobody")
def test_the_helper_checks_the_callers_groups_itself(helper: Helper) -> None:
    """Behind a socket opened to everyone by mistake, the helper's own check (the
    caller's groups from SO_PEERCRED and /proc) still refuses, and changes nothing."""
    before = helper.tree.settings()
    os.chmod(helper.socket, 0o666)
    out = as_nobody(lambda: json.dumps(call(helper.socket, {"op": "acquire", "device": "jetson"})))
    answer = json.loads(out)
    assert answer["ok"] is False
    assert f"uid {NOBODY} is not in the helper's group ({MY_GROUP})" in answer["error"]
    assert helper.tree.settings() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group", "no-such-group-uc"], "--group no-such-group-uc: no such group"),
        (["--group", MY_GROUP, "--mode", "0666"], "others may not connect"),
        (["--group", MY_GROUP, "--mode", "rw"], "an octal mode"),
        (["--group", MY_GROUP, "--device", "sim:jetson-nano"], "serves jetson or nvml:<index>"),
    ],
)
def test_bad_helper_arguments_are_one_line(folder: Path, args: List[str], message: str) -> None:
    argv = ["serve", "--socket", str(folder / "h.sock"), "--device", "jetson",
            "--sysfs-root", str(build_nano(folder / "nano").root), *args]  # fmt: skip
    code = "import sys; from undercap.devices.helper.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = run_captured([sys.executable, "-c", code, *argv])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (folder / "h.sock").exists()


def test_a_second_helper_on_the_same_socket_is_refused(helper: Helper) -> None:
    argv = ["serve", "--socket", helper.socket, "--group", MY_GROUP, "--device", "jetson",
            "--sysfs-root", str(helper.tree.root)]  # fmt: skip
    env = dict(os.environ, UNDERCAP_STATE_DIR=str(helper.folder / "state"))
    proc = run_captured([sys.executable, "-m", "undercap.devices.helper.cli", *argv], env=env)
    assert proc.returncode == 2 and "another undercap-helper is serving on" in proc.stderr
    assert call(helper.socket, {"op": "hello"})["ok"]


RUN = ["--model", "small-cnn", "--batch-sizes", "16,64", "--max-samples", "1500",
       "--eval-every", "128", "--torch-device", "cpu", "--no-progress", "--proxy", "digits",
       "--proxy-limit", "300", "--target", "digits", "--target-limit", "600",
       "--target-accuracy", "0.6", "--estimate-seeds", "1", "--power-limit", "20"]  # fmt: skip


def _mhz(values: List[str], unlocked: str) -> List[str]:
    return [f"{int(v) / 1e6:g}" for v in values if v != unlocked]


@pytest.mark.server  # the server side: Python >= 3.8 (conftest.py)
def test_run_through_the_helper_locks_and_restores_as_a_direct_run(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --device jetson` as an ordinary user with the helper locks the clocks a
    direct run as root locks, in the same order, and the tree ends as it began. As root
    the helper's run is a forked child running as `nobody` (the fake tree's files are
    root's: it could not write them if it tried); elsewhere it runs in this process with
    its sysfs writer failing the test. The direct run goes first: its imports are then
    in the child too, which `nobody` could not read from root's interpreter."""
    import undercap.devices.jetson.device as jetson_device
    from undercap.cli import main

    tree = build_nano(folder / "nano")
    before = tree.settings()
    work = folder / "work"
    work.mkdir()
    os.chmod(str(work), 0o777)
    writes: List[tuple] = []

    def recorded(path: Path, value: str) -> None:
        writes.append((path.name, value))
        Path(path).write_text(value)

    monkeypatch.setattr(jetson_device, "write_attr", recorded)
    monkeypatch.setenv("UNDERCAP_STATE_DIR", str(work / "state"))
    dev = ["--device", "jetson", "--sysfs-root", str(tree.root), *RUN]
    assert main(["run", *dev, "-o", str(folder / "direct")]) == 0
    assert tree.settings() == before
    direct_locks = _mhz([v for name, v in writes if name == "min_freq"], before["min_freq"])

    group = grp.getgrgid(NOBODY).gr_name if ROOT else MY_GROUP
    helper = Helper(folder, tree, group=group).start()

    def via_helper() -> str:
        monkeypatch.setattr(jetson_device, "write_attr", _no_writes)
        out = work / "via-helper"
        rc = main(["run", *dev, "--helper", helper.socket, "--cache-dir", str(work / "cache"),
                   "-o", str(out)])  # fmt: skip
        return json.dumps({"rc": rc, "uid": os.getuid(), "out": str(out)})

    try:
        result = json.loads(as_nobody(via_helper) if ROOT else via_helper())
    finally:
        helper.stop()
    assert result["rc"] == 0 and result["uid"] == (NOBODY if ROOT else os.getuid())
    assert tree.settings() == before
    log = helper.log.read_text()
    helper_locks = [ln.split(" at ")[1].split(" MHz")[0] for ln in log.splitlines()
                    if " locked jetson at " in ln]  # fmt: skip
    assert helper_locks == direct_locks and helper_locks
    assert log.count("back to its saved settings") == log.count(" acquired jetson")
    via = json.loads((Path(result["out"]) / "train.json").read_text())
    direct = json.loads((folder / "direct" / "train.json").read_text())
    # the batch size may differ: each run times its steps on this (busy) CPU
    for key in ("freq_mhz_requested", "clocks", "reached"):
        assert via[key] == direct[key], key
    assert not list((work / "state").glob("state-*.json"))


def _no_writes(path: Path, value: str) -> None:
    raise AssertionError(f"the training process wrote {value} to {path}")


def test_devices_says_clock_control_goes_through_the_helper(helper: Helper, capsys) -> None:
    from undercap.cli import main

    assert main(["devices", "--sysfs-root", str(helper.tree.root), "--helper", helper.socket,
                 "--no-nvml", "--json"]) == 0  # fmt: skip
    jetson = [d for d in json.loads(capsys.readouterr().out) if d["backend"] == "jetson"][0]
    assert jetson["control_permitted"] is True
    assert jetson["details"]["control"] == f"yes: through undercap-helper at {helper.socket}"


#: the systemd release that introduced each directive the unit uses (systemd.exec(5),
#: systemd.service(5), systemd.unit(5) "Added in version"; NEWS): Ubuntu 18.04, the base
#: of JetPack 4.6, ships systemd 237
SINCE = {
    "Description": 1, "After": 1, "Type": 1, "ExecStart": 1, "Restart": 1, "RestartSec": 1,
    "KillSignal": 1, "TimeoutStopSec": 188, "WantedBy": 1, "UMask": 1, "PrivateTmp": 1,
    "PrivateNetwork": 1, "CapabilityBoundingSet": 1, "NoNewPrivileges": 187,
    "SystemCallArchitectures": 209, "RuntimeDirectory": 211, "RuntimeDirectoryMode": 211,
    "RestrictAddressFamilies": 211, "ProtectHome": 214, "ProtectSystem": 214,
    "AmbientCapabilities": 229, "RestrictRealtime": 231, "ProtectKernelModules": 232,
    "ProtectControlGroups": 232, "RestrictNamespaces": 233, "StateDirectory": 235,
    "StateDirectoryMode": 235, "LockPersonality": 235,
}  # fmt: skip
UNIT = Path(__file__).resolve().parents[1] / "contrib" / "undercap-helper.service"


def _unit() -> dict:
    out: dict = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_the_systemd_unit_runs_on_systemd_237_and_is_hardened() -> None:
    unit = _unit()
    assert {k: SINCE.get(k) for k in unit if SINCE.get(k, 999) > 237} == {}
    assert unit["ProtectSystem"] == "strict"  # 232: strict; /sys stays writable under it
    assert "ProtectKernelTunables" not in unit  # it would make /sys, the clock files, read-only
    assert unit["NoNewPrivileges"] == "yes" and unit["RestrictAddressFamilies"] == "AF_UNIX"
    assert set(unit["CapabilityBoundingSet"].split()) == {"CAP_CHOWN", "CAP_SYS_ADMIN"}
    argv = unit["ExecStart"].split()
    assert argv[0].endswith("/undercap-helper") and argv[1] == "serve"
    assert argv[argv.index("--socket") + 1] == "/run/" + unit["RuntimeDirectory"] + "/helper.sock"
    assert argv[argv.index("--socket") + 1] == DEFAULT_SOCKET
    from undercap.devices.helper.cli import parser

    assert parser().parse_args(argv[1:]).devices == ["jetson"]  # the unit's line parses
    assert unit["StateDirectory"] == "undercap"  # /var/lib/undercap: the state files' folder


def test_systemd_reads_the_unit_without_a_warning(folder: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    helper_bin = shutil.which("undercap-helper") or str(
        Path(sys.executable).with_name("undercap-helper")
    )
    if analyze is None or not Path(helper_bin).exists():
        pytest.skip("needs systemd-analyze and an installed undercap-helper")
    unit = folder / UNIT.name
    unit.write_text(UNIT.read_text().replace("/opt/undercap/bin/undercap-helper", helper_bin))
    proc = run_captured([analyze, "verify", str(unit)])
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def test_an_nvidia_gpu_through_the_helper(folder: Path) -> None:
    """nvml:0 (the fake NVML module in the helper's process): locked at a clock NVML
    lists, unlocked when the client is killed; a clock it does not list is refused."""
    fakes = str(Path(__file__).resolve().parent / "fakes")  # its pynvml.py: the fake
    env = dict(os.environ, UNDERCAP_STATE_DIR=str(folder / "state"), PYTHONPATH=fakes)
    sock = str(folder / "h.sock")
    argv = [sys.executable, "-m", "undercap.devices.helper.cli", "serve", "--socket", sock,
            "--group", MY_GROUP, "--device", "nvml:0"]  # fmt: skip
    with open(str(folder / "helper.log"), "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(sock) and time.monotonic() < deadline:
            assert proc.poll() is None, (folder / "helper.log").read_text()
            time.sleep(0.05)
        idle = call(sock, {"op": "status"})["devices"]["nvml:0"]["current_mhz"]
        client = subprocess.Popen([sys.executable, "-c", CLIENT.replace('"jetson"', '"nvml:0"'), sock,
                                   "1500"], stdout=subprocess.PIPE, universal_newlines=True)  # fmt: skip
        assert client.stdout.readline().strip() == "locked"
        assert call(sock, {"op": "status"})["devices"]["nvml:0"] == {
            "controlled_by_pid": client.pid, "current_mhz": 1500.0}  # fmt: skip
        client.kill()
        client.wait()
        t0 = time.monotonic()
        while call(sock, {"op": "status"})["devices"]["nvml:0"]["current_mhz"] != idle:
            assert time.monotonic() - t0 < 1.0
            time.sleep(0.005)
        log_text = (folder / "helper.log").read_text()
        assert "locked nvml:0 at 1500 MHz" in log_text and "nvml:0 back to its saved" in log_text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
