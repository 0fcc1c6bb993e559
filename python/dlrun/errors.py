"""errors — the exceptions dlrun raises: one class per dl_status, all under dlrun.Error.

Each carries the library's one-line reason (str(e), e.reason) and its status name (e.status:
"invalid", "unsupported", ...). The classes also derive from the matching Python built-in, so
`except ValueError` catches a malformed model or a wrong input, `except MemoryError` a model too
big for memory, `except OSError` an unreadable file.
"""
from . import _capi


class Error(Exception):
    """A dlrun failure: `reason` is the one-line message, `status` the dl_status name."""

    status = "error"
    code = -1

    def __init__(self, reason, status=None):
        super().__init__(reason)
        self.reason = reason
        if status is not None:
            self.status = status


class InvalidArgument(Error, ValueError):
    """Bad input: a malformed model, weights or .npy, a wrong input name, shape or dtype (DL_E_INVALID)."""
    status, code = "invalid", _capi.E_INVALID


class Unsupported(Error):
    """A backend cannot run an op or feature it was asked to (DL_E_UNSUPPORTED)."""
    status, code = "unsupported", _capi.E_UNSUPPORTED


class OutOfMemory(Error, MemoryError):
    """An allocation failed, or the model does not fit the memory given (DL_E_NOMEM)."""
    status, code = "out of memory", _capi.E_NOMEM


class RuntimeFailure(Error, RuntimeError):
    """A failure while running: a driver error, a kernel failure (DL_E_RUNTIME)."""
    status, code = "runtime", _capi.E_RUNTIME


class NoDevice(Error):
    """The backend's device or library is missing (DL_E_NODEVICE)."""
    status, code = "no device", _capi.E_NODEVICE


class IOFailure(Error, OSError):
    """A file could not be read or written (DL_E_IO)."""
    status, code = "io", _capi.E_IO


_BY_CODE = {c.code: c for c in (InvalidArgument, Unsupported, OutOfMemory, RuntimeFailure, NoDevice, IOFailure)}


def raise_for(status, err):
    """Raises the exception for a dl_status other than DL_OK, with the reason from a dl_error."""
    if status == _capi.OK:
        return
    reason = _capi.text(err.msg) or _capi.text(_capi.lib.dl_status_name(status)) or f"status {status}"
    cls = _BY_CODE.get(status, Error)
    raise cls(reason) if cls is not Error else Error(reason, f"status {status}")
