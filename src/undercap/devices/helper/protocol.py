"""The helper's wire format: one JSON object per line, each way.

A request names an operation and its arguments, `{"op": "lock", "device": "jetson",
"freq_mhz": 768.0}`; the answer is `{"ok": true, ...}` or `{"ok": false, "error":
"one line"}`, which the client turns into one `error:` line. Operations: `hello` (who
the helper is, which devices it serves, who it sees calling), `status`, `acquire`
(become the device's controlling client: its settings are saved), `lock` (a frequency
the device lists), `release` (the saved settings go back).
"""

import json
from typing import Any, Dict

#: where the systemd unit puts the socket (RuntimeDirectory=undercap)
DEFAULT_SOCKET = "/run/undercap/helper.sock"
#: names the socket for clients, like --helper
ENV_SOCKET = "UNDERCAP_HELPER"
#: no request is longer: a longer line is refused and the connection closed
MAX_LINE_BYTES = 4096
OPS = ("hello", "status", "acquire", "lock", "release")


class ProtocolError(ValueError):
    """A request the helper cannot read."""


def encode(obj: Dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def decode(line: bytes) -> Dict[str, Any]:
    """One request or answer; anything but a JSON object is a ProtocolError."""
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"not a JSON object on one line of UTF-8 ({e})") from e
    if not isinstance(obj, dict):
        raise ProtocolError(f"a request is a JSON object, got {type(obj).__name__}")
    return obj


def refusal(message: str) -> Dict[str, Any]:
    return {"ok": False, "error": message}
