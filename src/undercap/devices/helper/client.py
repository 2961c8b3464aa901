"""The client side: the Jetson and NVML backends relay clock control through a helper
when its socket is there (`--helper PATH`, else $UNDERCAP_HELPER, else the default
path), and otherwise change the clocks themselves as root, or run read-only.

The connection stays open for as long as the device is open: the helper treats its
closing, however the process ends, as the end of the client's control.
"""

import contextlib
import os
import socket
from typing import Any, Dict, List, Optional

from undercap.devices.helper.protocol import (
    DEFAULT_SOCKET,
    ENV_SOCKET,
    MAX_LINE_BYTES,
    decode,
    encode,
)
from undercap.errors import DeviceError, DevicePermissionError


def helper_socket(given: Optional[str] = None) -> Optional[str]:
    """The helper socket to use: `given` (--helper) or $UNDERCAP_HELPER, which must
    exist, else the default path where it exists, else None (no helper here)."""
    named = given or os.environ.get(ENV_SOCKET)
    if named:
        if not os.path.exists(named):
            how = "--helper" if given else ENV_SOCKET
            raise DeviceError(
                f"{how} {named}: no undercap-helper socket there; start the helper "
                f"(systemctl start undercap-helper) or drop {how}"
            )
        return named
    return DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None


class HelperClient:
    """One connection to the helper at `path`; `call` sends a request and returns the
    answer, raising the helper's refusal as one line."""

    def __init__(self, path: str, timeout_s: float = 60.0) -> None:
        self.path = path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
        except PermissionError as e:
            sock.close()
            raise DevicePermissionError(
                f"cannot connect to undercap-helper at {path}: permission denied; ask the admin to "
                "add you to the helper's group (then log in again), or pass --read-only"
            ) from e
        except OSError as e:
            sock.close()
            raise DeviceError(
                f"cannot connect to undercap-helper at {path}: {e.strerror or e}"
            ) from e
        self._sock, self._file = sock, sock.makefile("rb")

    def call(self, op: str, **fields: Any) -> Dict[str, Any]:
        try:
            self._sock.sendall(encode(dict(fields, op=op)))
            line = self._file.readline(MAX_LINE_BYTES * 16)
        except OSError as e:
            raise DeviceError(f"undercap-helper at {self.path}: {e}") from e
        if not line:
            raise DeviceError(
                f"undercap-helper at {self.path} closed the connection (it stopped, or "
                "refused this caller)"
            )
        answer = decode(line)
        if not answer.get("ok"):
            error = str(answer.get("error", "refused"))
            kind = DevicePermissionError if "group" in error else DeviceError
            raise kind(f"undercap-helper at {self.path}: {error}")
        return answer

    def close(self) -> None:
        for part in (self._file, self._sock):
            with contextlib.suppress(OSError):
                part.close()


class Relay:
    """Clock control of one device through the helper (the backends' `relay`)."""

    def __init__(self, client: HelperClient, device: str, served: List[str]) -> None:
        self.client, self.device, self.served = client, device, served

    @classmethod
    def open(cls, device: str, given: Optional[str] = None) -> "Optional[Relay]":
        """A relay for `device` where a helper serves it; None where there is no helper."""
        path = helper_socket(given)
        if path is None:
            return None
        client = HelperClient(path)
        try:
            served = [str(d) for d in client.call("hello").get("devices", [])]
            if device not in served:
                raise DeviceError(
                    f"undercap-helper at {path} serves {', '.join(served) or 'nothing'}, not "
                    f"{device}; ask the admin to add --device {device} to it, or pass --read-only"
                )
        except BaseException:
            client.close()
            raise
        return cls(client, device, served)

    def describe(self) -> str:
        return f"through undercap-helper at {self.client.path}"

    def acquire(self) -> None:
        self.client.call("acquire", device=self.device)

    def lock(self, freq_mhz: float) -> float:
        answer = self.client.call("lock", device=self.device, freq_mhz=float(freq_mhz))
        return float(answer["freq_mhz"])

    def release(self) -> None:
        self.client.call("release", device=self.device)

    def close(self) -> None:
        self.client.close()
