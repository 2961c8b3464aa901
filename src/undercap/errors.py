"""Errors a user can cause and fix. The CLI prints them as one `error:` line, exit 2."""


class UndercapError(Exception):
    """Base class: the message says what went wrong and what to do."""


class ArtifactError(UndercapError):
    """A profile/efficiency/result file is missing, malformed or inconsistent."""


class DataError(UndercapError):
    """A dataset file is missing or not in the expected format."""


class DeviceError(UndercapError):
    """A device backend failed (unknown device, unsupported operation, vendor error)."""


class DevicePermissionError(DeviceError):
    """The device exists but we may not change (or read) it: names the file and the fix."""


class DeviceOutOfMemoryError(DeviceError):
    """The batch does not fit in device memory."""


class InfeasibleError(UndercapError):
    """No configuration satisfies the power limit."""
