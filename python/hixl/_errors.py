"""The exceptions hixl raises: one class per HIXL_ERR_* code of hixl.h.

Every failure of the library raises a subclass of :class:`HixlError` whose
``code`` is the C API's negative error code and whose message is the
library's own explanation (``str(err)``).  Where a built-in exception means
the same thing, the class derives from it too, so ``except TimeoutError`` or
``except ValueError`` also work.
"""

SUCCESS = 0
ERR_INVALID_ARG = -1
ERR_NOT_INITIALIZED = -2
ERR_NOT_REGISTERED = -3
ERR_INVALID_RANK = -4
ERR_TIMEOUT = -5
ERR_PEER_FAILED = -6
ERR_NO_MEMORY = -7
ERR_TRANSPORT = -8
ERR_UNSUPPORTED = -9
ERR_ALREADY_INITIALIZED = -10
ERR_BOOTSTRAP = -11
ERR_INTERNAL = -12
ERR_QUEUE_FULL = -13

_NAMES = {
    SUCCESS: "HIXL_SUCCESS",
    ERR_INVALID_ARG: "HIXL_ERR_INVALID_ARG",
    ERR_NOT_INITIALIZED: "HIXL_ERR_NOT_INITIALIZED",
    ERR_NOT_REGISTERED: "HIXL_ERR_NOT_REGISTERED",
    ERR_INVALID_RANK: "HIXL_ERR_INVALID_RANK",
    ERR_TIMEOUT: "HIXL_ERR_TIMEOUT",
    ERR_PEER_FAILED: "HIXL_ERR_PEER_FAILED",
    ERR_NO_MEMORY: "HIXL_ERR_NO_MEMORY",
    ERR_TRANSPORT: "HIXL_ERR_TRANSPORT",
    ERR_UNSUPPORTED: "HIXL_ERR_UNSUPPORTED",
    ERR_ALREADY_INITIALIZED: "HIXL_ERR_ALREADY_INITIALIZED",
    ERR_BOOTSTRAP: "HIXL_ERR_BOOTSTRAP",
    ERR_INTERNAL: "HIXL_ERR_INTERNAL",
    ERR_QUEUE_FULL: "HIXL_ERR_QUEUE_FULL",
}


class HixlError(Exception):
    """A failure reported by hixl.

    ``code`` is the negative HIXL_ERR_* value, ``name`` its symbolic name and
    ``message`` (also ``str(err)``) the library's explanation.
    """

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def name(self):
        return _NAMES.get(self.code, "HIXL_ERR_UNKNOWN")

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class InvalidArgumentError(HixlError, ValueError):
    """HIXL_ERR_INVALID_ARG: a null or unusable address, a bad size or range."""


class NotInitializedError(HixlError, RuntimeError):
    """HIXL_ERR_NOT_INITIALIZED: called before hixl.init() or after hixl.finalize()."""


class NotRegisteredError(HixlError):
    """HIXL_ERR_NOT_REGISTERED: the remote range is not inside one region the peer registered."""


class InvalidRankError(HixlError, ValueError):
    """HIXL_ERR_INVALID_RANK: a rank outside [0, world_size())."""


class HixlTimeoutError(HixlError, TimeoutError):
    """HIXL_ERR_TIMEOUT: a wait exceeded HIXL_TIMEOUT_MS."""


class PeerFailedError(HixlError, ConnectionError):
    """HIXL_ERR_PEER_FAILED: a peer process died or left."""


class NoMemoryError(HixlError, MemoryError):
    """HIXL_ERR_NO_MEMORY: an allocation or a mapping failed."""


class TransportError(HixlError):
    """HIXL_ERR_TRANSPORT: the transport failed."""


class UnsupportedError(HixlError, NotImplementedError):
    """HIXL_ERR_UNSUPPORTED: not available in this build or setting (e.g. CUDA tensors)."""


class AlreadyInitializedError(HixlError, RuntimeError):
    """HIXL_ERR_ALREADY_INITIALIZED: hixl.init() called twice."""


class BootstrapError(HixlError):
    """HIXL_ERR_BOOTSTRAP: the environment or the rendezvous is wrong."""


class InternalError(HixlError):
    """HIXL_ERR_INTERNAL: a bug in hixl; please report it."""


class QueueFullError(HixlError):
    """HIXL_ERR_QUEUE_FULL: the target's notification queue holds HIXL_NOTIFY_QUEUE_DEPTH
    messages already.  Nothing was sent and nothing is dropped: retry later."""


_CLASSES = {
    ERR_INVALID_ARG: InvalidArgumentError,
    ERR_NOT_INITIALIZED: NotInitializedError,
    ERR_NOT_REGISTERED: NotRegisteredError,
    ERR_INVALID_RANK: InvalidRankError,
    ERR_TIMEOUT: HixlTimeoutError,
    ERR_PEER_FAILED: PeerFailedError,
    ERR_NO_MEMORY: NoMemoryError,
    ERR_TRANSPORT: TransportError,
    ERR_UNSUPPORTED: UnsupportedError,
    ERR_ALREADY_INITIALIZED: AlreadyInitializedError,
    ERR_BOOTSTRAP: BootstrapError,
    ERR_INTERNAL: InternalError,
    ERR_QUEUE_FULL: QueueFullError,
}


# Shown as hixl.NotRegisteredError (etc.) in tracebacks.
for _cls in (HixlError, *_CLASSES.values()):
    _cls.__module__ = "hixl"
del _cls


def error_for(code, message):
    """The exception object for an error code (used by the native module)."""
    return _CLASSES.get(code, HixlError)(code, message)


__all__ = [
    "HixlError", "InvalidArgumentError", "NotInitializedError", "NotRegisteredError",
    "InvalidRankError", "HixlTimeoutError", "PeerFailedError", "NoMemoryError",
    "TransportError", "UnsupportedError", "AlreadyInitializedError", "BootstrapError",
    "InternalError", "QueueFullError",
]
