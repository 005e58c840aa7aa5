"""hixl.errors: the error codes and the exceptions hixl raises.

The world API (hixl.init, put, get, ...) raises one class per HIXL_ERR_*
code of include/hixl/hixl.h: a subclass of :class:`HixlError` whose ``code``
is the C API's negative error code (the ``ERR_*`` constants here, named as
in hixl.h without the ``HIXL_`` prefix) and whose message is the library's
own explanation (``str(err)``).  ``CLASSES`` maps each code to its class;
``error_for(code, message)`` makes the exception, and is what the native
module raises through, so this table is the only one.  Where a built-in
exception means the same thing, the class derives from it too, so ``except
TimeoutError`` or ``except ValueError`` also work.

hixl.Engine raises :class:`EngineError` subclasses instead, by the engine's
status numbers (``ENGINE_*``, include/hixl/engine.hpp; ``ENGINE_CLASSES``,
``engine_error_for``).  Where an engine status means the same as a C code,
its class is also that code's class: an engine NotConnectedError is a
HixlNotConnectedError, a RemoteNotRegisteredError a NotRegisteredError.

tests/python/test_error_table.py checks these tables against the headers.
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
ERR_NOT_CONNECTED = -14

# code -> its name in hixl.h (also hixl.strerror(code) up to the colon).
NAMES = {
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
    ERR_NOT_CONNECTED: "HIXL_ERR_NOT_CONNECTED",
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
        return NAMES.get(self.code, "HIXL_ERR_UNKNOWN")

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


class HixlNotConnectedError(HixlError, ConnectionError):
    """HIXL_ERR_NOT_CONNECTED: no live connection to that engine (the engine API raises it as
    hixl.NotConnectedError, a subclass, with the engine's status number as ``code``)."""


# code -> the exception class error_for() raises for it.
CLASSES = {
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
    ERR_NOT_CONNECTED: HixlNotConnectedError,
}


# Shown as hixl.NotRegisteredError (etc.) in tracebacks.
for _cls in (HixlError, *CLASSES.values()):
    _cls.__module__ = "hixl"
del _cls


# ------------------------------------------------------------------ the engine API
#
# hixl.Engine reports the status numbers of the CANN library's engine API
# (include/hixl/engine.hpp); `code` and `status` are that number.

ENGINE_SUCCESS = 0
ENGINE_PARAM_INVALID = 103900
ENGINE_TIMEOUT = 103901
ENGINE_NOT_CONNECTED = 103902
ENGINE_ALREADY_CONNECTED = 103903
ENGINE_UNSUPPORTED = 103905
ENGINE_RESOURCE_EXHAUSTED = 203900
ENGINE_FAILED = 503900

# engine status -> its name in engine.hpp (hixl::EngineStatusName).
ENGINE_NAMES = {
    ENGINE_SUCCESS: "SUCCESS",
    ENGINE_PARAM_INVALID: "PARAM_INVALID",
    ENGINE_TIMEOUT: "TIMEOUT",
    ENGINE_NOT_CONNECTED: "NOT_CONNECTED",
    ENGINE_ALREADY_CONNECTED: "ALREADY_CONNECTED",
    ENGINE_UNSUPPORTED: "UNSUPPORTED",
    ENGINE_RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
    ENGINE_FAILED: "FAILED",
}


class EngineError(HixlError):
    """A failure reported by hixl.Engine; ``status`` (also ``code``) is the
    engine status number, ``name`` its name (e.g. ``"NOT_CONNECTED"``)."""

    @property
    def status(self):
        return self.code

    @property
    def name(self):
        return ENGINE_NAMES.get(self.code, "UNKNOWN")


class ParamInvalidError(EngineError, ValueError):
    """PARAM_INVALID: a bad argument, address, range or handle."""


class RemoteNotRegisteredError(ParamInvalidError, NotRegisteredError):
    """PARAM_INVALID for a remote range the peer has not registered (also a NotRegisteredError)."""


class EngineTimeoutError(EngineError, TimeoutError):
    """TIMEOUT: the call's timeout passed (nobody answered, or the transfer was too slow)."""


class NotConnectedError(EngineError, HixlNotConnectedError):
    """NOT_CONNECTED: no connection to that engine, or it went away (also a HixlNotConnectedError,
    hence a ConnectionError)."""


class AlreadyConnectedError(EngineError):
    """ALREADY_CONNECTED: connect() to an engine already connected."""


class EngineUnsupportedError(EngineError, NotImplementedError):
    """UNSUPPORTED: not available (device memory, a transport not built)."""


class ResourceExhaustedError(EngineError):
    """RESOURCE_EXHAUSTED: the peer's notification queue is full, or memory ran out."""


class EngineFailedError(EngineError, RuntimeError):
    """FAILED: the call failed (a peer died, a call after finalize(), ...)."""


# engine status -> the exception class engine_error_for() raises for it.
ENGINE_CLASSES = {
    ENGINE_PARAM_INVALID: ParamInvalidError,
    ENGINE_TIMEOUT: EngineTimeoutError,
    ENGINE_NOT_CONNECTED: NotConnectedError,
    ENGINE_ALREADY_CONNECTED: AlreadyConnectedError,
    ENGINE_UNSUPPORTED: EngineUnsupportedError,
    ENGINE_RESOURCE_EXHAUSTED: ResourceExhaustedError,
    ENGINE_FAILED: EngineFailedError,
}

for _cls in (EngineError, RemoteNotRegisteredError, *ENGINE_CLASSES.values()):
    _cls.__module__ = "hixl"
del _cls


def engine_error_for(status, message):
    """The exception object for an engine status (used by the native module)."""
    if status == ENGINE_PARAM_INVALID and "Remote memory not registered" in message:
        return RemoteNotRegisteredError(status, message)
    return ENGINE_CLASSES.get(status, EngineError)(status, message)


def error_for(code, message):
    """The exception object for an error code (used by the native module)."""
    return CLASSES.get(code, HixlError)(code, message)


__all__ = [
    "HixlError", "InvalidArgumentError", "NotInitializedError", "NotRegisteredError",
    "InvalidRankError", "HixlTimeoutError", "PeerFailedError", "NoMemoryError",
    "TransportError", "UnsupportedError", "AlreadyInitializedError", "BootstrapError",
    "InternalError", "QueueFullError", "HixlNotConnectedError",
    "EngineError", "ParamInvalidError", "RemoteNotRegisteredError", "EngineTimeoutError", "NotConnectedError",
    "AlreadyConnectedError", "EngineUnsupportedError", "ResourceExhaustedError", "EngineFailedError",
]
