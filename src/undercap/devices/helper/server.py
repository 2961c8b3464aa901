"""The helper process: a Unix socket, the devices named at start, and the one client
that controls each of them (package docstring).

One thread and a selector: requests are short (a few sysfs writes or one NVML call),
and one thread means no two requests ever touch a device at once. A connection that
closes (EOF or a reset: the client exited, crashed or was killed) releases every device
it held at once, which the selector sees as soon as the kernel closes the socket.
"""

import contextlib
import grp
import logging
import math
import os
import selectors
import signal
import socket
import stat
import struct
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from undercap.devices.base import SNAP_TOLERANCE_MHZ, Device, handling_signals
from undercap.devices.helper.protocol import (
    MAX_LINE_BYTES,
    OPS,
    ProtocolError,
    decode,
    encode,
    refusal,
)
from undercap.devices.state import read_state, remove_state
from undercap.errors import DeviceError, UndercapError

log = logging.getLogger("undercap-helper")


class Peer(NamedTuple):
    """Who is on the other end, as the kernel says (SO_PEERCRED) when it connected."""

    pid: int
    uid: int
    gid: int
    groups: frozenset

    def __str__(self) -> str:
        return f"uid {self.uid} (pid {self.pid})"


def peer_of(conn: socket.socket) -> Peer:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid, frozenset({gid}) | _supplementary_groups(pid))


def _supplementary_groups(pid: int) -> frozenset:
    """The caller's other groups, from /proc/<pid>/status ("Groups:"), read at connect."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("Groups:"):
            return frozenset(int(g) for g in line.split()[1:])
    return frozenset()


class _Client:
    def __init__(self, conn: socket.socket, peer: Peer, refused: Optional[str] = None) -> None:
        self.conn, self.peer, self.buffer = conn, peer, b""
        self.refused = refused  # a caller outside the group: its first request gets this


class _Claim(NamedTuple):
    """A device's controlling client and the settings to put back."""

    client: _Client
    saved: Dict[str, Any]


#: the selector's mark for the wakeup socket a signal writes to (serve_forever)
_WAKE = object()


class Helper:
    """Serve `devices` (name -> a backend opened with clock control) on `socket_path`
    to the members of group `gid`."""

    def __init__(self, socket_path: str, gid: int, devices: Dict[str, Device]) -> None:
        self.socket_path, self.gid, self.devices = socket_path, gid, devices
        self.claims = {}  # type: Dict[str, _Claim]
        self.selector = selectors.DefaultSelector()
        self.listener = None  # type: Optional[socket.socket]

    # --- start and stop -----------------------------------------------------------
    def restore_leftovers(self) -> List[str]:
        """Settings a killed helper (or a killed direct run) left changed: put back from
        their state files before serving. A live owner means another helper serves."""
        done = []
        for name, device in self.devices.items():
            path = getattr(device, "state_file", None)
            if path is None or not Path(path).is_file():
                continue
            saved = read_state(path)
            if saved.owner_running():
                raise UndercapError(
                    f"{name} is controlled by the running process {saved.pid} (its state file "
                    f"{path}); stop it first"
                )
            device.apply_state(saved.state)  # type: ignore[attr-defined]
            remove_state(path)
            done.append(f"{name}: restored the settings left by pid {saved.pid} ({path})")
        return done

    def listen(self, mode: int) -> None:
        path = Path(self.socket_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            _refuse_if_served(path)
            path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # no moment at which others could connect
        try:
            listener.bind(str(path))
        finally:
            os.umask(old)
        try:
            os.chown(str(path), -1, self.gid)
        except PermissionError:  # not root (a test, a trial run): the helper's own check holds
            log.warning(
                "cannot give %s to group %d (not root); callers are checked by their groups only",
                path,
                self.gid,
            )
        os.chmod(str(path), mode)
        listener.listen(16)
        listener.setblocking(False)
        self.listener = listener
        self.selector.register(listener, selectors.EVENT_READ, None)

    def serve_forever(self, ready: Optional[Callable[[], None]] = None) -> None:
        """Until SIGTERM/SIGINT/SIGHUP; every device goes back before it returns. The
        handler only records the signal and the wakeup fd wakes the selector: a signal
        never interrupts a request midway (a lock half-written, a restore half done),
        and no handler for a request's errors can swallow it."""
        stopping = []  # type: List[int]

        def stop(signum: int, _frame: Any) -> None:
            stopping.append(signum)

        wake_r, wake_w = socket.socketpair()
        for end in (wake_r, wake_w):
            end.setblocking(False)
        self.selector.register(wake_r, selectors.EVENT_READ, _WAKE)
        old_fd = signal.set_wakeup_fd(wake_w.fileno())
        with handling_signals([signal.SIGTERM, signal.SIGINT, signal.SIGHUP], stop):
            try:
                if ready is not None:
                    ready()
                while not stopping:
                    for key, _ in self.selector.select():
                        if key.data is _WAKE:
                            with contextlib.suppress(OSError):
                                wake_r.recv(512)  # the signal numbers; `stopping` has them
                        elif not stopping:
                            self._ready(key)
                log.info("signal %s: putting every device back", stopping[0])
            finally:
                self.shutdown()  # closes wake_r with every registered socket
                signal.set_wakeup_fd(old_fd)
                wake_w.close()

    def shutdown(self) -> None:
        for name in list(self.claims):
            self._release(name, "the helper stops")
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        if self.listener is not None:
            self.listener = None
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)

    # --- connections --------------------------------------------------------------
    def _ready(self, key: selectors.SelectorKey) -> None:
        if key.data is None:
            self._accept()
            return
        client = key.data
        try:
            chunk = client.conn.recv(MAX_LINE_BYTES)
        except (ConnectionError, OSError):
            chunk = b""
        if not chunk:
            self._drop(client, "its connection closed")
            return
        client.buffer += chunk
        while b"\n" in client.buffer and client in self._clients():
            line, client.buffer = client.buffer.split(b"\n", 1)
            if client.refused is not None:  # answered, then closed: the caller reads why
                self._answer(client, refusal(client.refused))
                self._drop(client, "not in the group")
                return
            self._answer(client, self.handle(client, line))
        if len(client.buffer) > MAX_LINE_BYTES:
            self._answer(client, refusal(f"request longer than {MAX_LINE_BYTES} bytes"))
            self._drop(client, "it sent an oversized request")

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        peer = peer_of(conn)
        refused = None
        if not (peer.uid == 0 or self.gid in peer.groups):
            log.warning("refused %s: not in group %d", peer, self.gid)
            refused = (
                f"uid {peer.uid} is not in the helper's group ({_group_name(self.gid)}); ask "
                "the admin to add you to it"
            )
        conn.setblocking(False)
        self.selector.register(conn, selectors.EVENT_READ, _Client(conn, peer, refused))

    def _clients(self) -> List[_Client]:
        return [k.data for k in self.selector.get_map().values() if isinstance(k.data, _Client)]

    def _answer(self, client: _Client, answer: Dict[str, Any]) -> None:
        try:
            client.conn.sendall(encode(answer))
        except OSError:  # BlockingIOError and ConnectionError among them
            self._drop(client, "it stopped reading")

    def _drop(self, client: _Client, why: str) -> None:
        for name, claim in list(self.claims.items()):
            if claim.client is client:
                self._release(name, f"{client.peer}: {why}")
        if client in self._clients():
            self.selector.unregister(client.conn)
            client.conn.close()

    # --- requests -----------------------------------------------------------------
    def handle(self, client: _Client, line: bytes) -> Dict[str, Any]:
        """One request's answer; no request, however malformed, raises here."""
        try:
            request = decode(line)
            op = request.get("op")
            if op not in OPS:
                return refusal("unknown op {!r}; one of {}".format(op, ", ".join(OPS)))
            return getattr(self, "_op_" + op)(client, request)
        except (ProtocolError, UndercapError) as e:
            return refusal(str(e))
        except Exception as e:  # a bug must not stop the helper or leave a device changed
            log.exception("request %r from %s", line[:200], client.peer)
            return refusal(f"internal error: {type(e).__name__}: {e}")

    def _op_hello(self, client: _Client, _request: Dict[str, Any]) -> Dict[str, Any]:
        from undercap import __version__

        return {
            "ok": True,
            "helper": __version__,
            "devices": sorted(self.devices),
            "uid": client.peer.uid,
            "pid": os.getpid(),
        }

    def _op_status(self, _client: _Client, _request: Dict[str, Any]) -> Dict[str, Any]:
        held = {n: c.client.peer.pid for n, c in self.claims.items()}
        return {
            "ok": True,
            "devices": {
                n: {"controlled_by_pid": held.get(n), "current_mhz": d.current_freq_mhz()}
                for n, d in self.devices.items()
            },
        }

    def _op_acquire(self, client: _Client, request: Dict[str, Any]) -> Dict[str, Any]:
        name, device = self._device(request)
        claim = self.claims.get(name)
        if claim is not None and claim.client is not client:
            return refusal(
                f"{name} is controlled by another client, {claim.client.peer}; wait for it to finish"
            )
        if claim is None:
            self.claims[name] = _Claim(client, device.save_state())
            log.info("%s acquired %s", client.peer, name)
        return {"ok": True, "freqs_mhz": list(device.available_freqs_mhz())}

    def _op_lock(self, client: _Client, request: Dict[str, Any]) -> Dict[str, Any]:
        name, device = self._device(request, held_by=client)
        freq = request.get("freq_mhz")
        table = device.available_freqs_mhz()
        if isinstance(freq, bool) or not isinstance(freq, (int, float)) or not math.isfinite(freq):
            return refusal(f"freq_mhz must be a number of MHz, got {freq!r}")
        if not any(abs(freq - f) <= SNAP_TOLERANCE_MHZ for f in table):
            steps = ", ".join(f"{f:g}" for f in table)
            return refusal(f"{name} has no {freq:g} MHz step; it lists {steps}")
        actual = device.set_freq_mhz(float(freq))
        log.info("%s locked %s at %g MHz (reads %g)", client.peer, name, freq, actual)
        return {"ok": True, "freq_mhz": actual, "current_mhz": device.current_freq_mhz()}

    def _op_release(self, client: _Client, request: Dict[str, Any]) -> Dict[str, Any]:
        name, _ = self._device(request, held_by=client)
        self._release(name, f"{client.peer} released it")
        return {"ok": True}

    def _device(self, request: Dict[str, Any], held_by: Optional[_Client] = None) -> Any:
        """The device the request names (and its name), which `held_by` must have acquired."""
        name = request.get("device")
        if not isinstance(name, str) or name not in self.devices:
            served = ", ".join(sorted(self.devices))
            raise ProtocolError(f"device {name!r} is not served here; the helper serves {served}")
        claim = self.claims.get(name)
        if held_by is not None and (claim is None or claim.client is not held_by):
            raise ProtocolError(f"acquire {name} first")
        return name, self.devices[name]

    def _release(self, name: str, why: str) -> None:
        claim = self.claims.pop(name)
        try:
            self.devices[name].restore_state(claim.saved)
            log.info("%s back to its saved settings (%s)", name, why)
        except DeviceError as e:  # kept in the state file: the next start puts it back
            log.error("%s: could not restore (%s): %s", name, why, e)


def _refuse_if_served(path: Path) -> None:
    """A socket another helper answers on is not ours to take over."""
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise UndercapError(
            f"{path} exists and is not a socket; remove it or pick another --socket"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return  # a socket left by a helper that died
    finally:
        probe.close()
    raise UndercapError(f"another undercap-helper is serving on {path}")


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
