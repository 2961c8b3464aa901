"""Device state is restored on every exit path: normal, exception, SIGINT, SIGTERM."""

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from undercap.devices.base import Device, DeviceInfo, controlled, locked


class MemDevice(Device):
    name = "mem"

    def __init__(self) -> None:
        self.freq = 500.0
        self.governor = "nvhost_podgov"

    def available_freqs_mhz(self):
        return (100.0, 300.0, 500.0, 700.0)

    def current_freq_mhz(self):
        return self.freq

    def set_freq_mhz(self, freq_mhz):
        self.freq = self.nearest_freq_mhz(freq_mhz)
        self.governor = "userspace"
        return self.freq

    def save_state(self):
        return {"freq": self.freq, "governor": self.governor}

    def restore_state(self, state):
        self.freq, self.governor = state["freq"], state["governor"]

    def power_w(self):
        return 1.0

    def memory_bytes(self):
        return 1 << 30

    def info(self):
        return DeviceInfo(
            "mem", "test", False, self.available_freqs_mhz(), 1 << 30, (), False, True
        )


def test_locked_snaps_and_restores():
    d = MemDevice()
    with locked(d, 290.0) as actual:
        assert actual == 300.0 and d.governor == "userspace"
    assert (d.freq, d.governor) == (500.0, "nvhost_podgov")


def test_restored_after_exception_and_ctrl_c():
    d = MemDevice()
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)), controlled(d):
            d.set_freq_mhz(100.0)
            raise exc
        assert d.freq == 500.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_restored_after_signal_in_subprocess(tmp_path, sig):
    """A process holding a lock, signalled: the clock is back as it was. The child
    says when it holds the lock (no fixed wait), and takes Ctrl-C as an interactive
    Python does (KeyboardInterrupt) even where it inherited SIGINT ignored, as a
    background job of a non-interactive shell does (`make test &`): then SIGINT never
    reached it and the wait for its exit ran out."""
    state = tmp_path / "state.json"
    script = textwrap.dedent(
        f"""
        import signal, sys, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(tmp_path)!r})
        from test_base_dev import FileDevice
        from undercap.devices.base import locked
        d = FileDevice({str(state)!r})
        with locked(d, 100.0):
            print("locked", flush=True)
            time.sleep(600)
        """
    )
    (tmp_path / "test_base_dev.py").write_text(_FILE_DEVICE_SRC)
    state.write_text(json.dumps({"freq": 500.0}))
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )
    try:
        line = proc.stdout.readline()  # blocks until the child holds the lock (or died)
        assert line.strip() == "locked", proc.stderr.read()
        assert json.loads(state.read_text())["freq"] == 100.0
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)  # generous: a loaded machine is slow
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, err
    assert json.loads(state.read_text())["freq"] == 500.0, err


_FILE_DEVICE_SRC = '''
import json
from undercap.devices.base import Device, DeviceInfo


class FileDevice(Device):
    """Keeps its clock in a JSON file so another process can see it."""

    name = "file"

    def __init__(self, path):
        self.path = path

    def _get(self):
        with open(self.path) as f:
            return json.load(f)

    def available_freqs_mhz(self):
        return (100.0, 500.0)

    def current_freq_mhz(self):
        return self._get()["freq"]

    def set_freq_mhz(self, freq_mhz):
        with open(self.path, "w") as f:
            json.dump({"freq": freq_mhz}, f)
        return freq_mhz

    def save_state(self):
        return self._get()

    def restore_state(self, state):
        with open(self.path, "w") as f:
            json.dump(state, f)

    def power_w(self):
        return 1.0

    def memory_bytes(self):
        return 1

    def info(self):
        return DeviceInfo("file", "test", False, (100.0, 500.0), 1, (), False, True)
'''
