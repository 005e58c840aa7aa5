"""hixl.errors: the error codes and the exceptions hixl raises.

The codes come from the one table of include/hixl/hixl_errors.h
(HIXL_ERROR_CODES, HIXL_ENGINE_STATUSES), which the native module exports
(``_hixl._error_table()``, ``_hixl._engine_status_table()``): the constants,
``NAMES``, ``DESCRIPTIONS``, ``CLASSES`` and the ``ENGINE_*`` tables below are
built from it when this module is imported, and the import fails if the table
names an exception class that is not defined here.  A code added to the
table without its class here cannot go unnoticed.

The world API (hixl.init, put, get, ...) raises one class per HIXL_ERR_*
code of include/hixl/hixl.h: a subclass of :class:`HixlError` whose ``code``
is the C API's negative error code (the ``ERR_*`` constants here, named as
in hixl.h without the ``HIXL_`` prefix) and whose message is the library's
own explanation (``str(err)``).  ``CLASSES`` maps each code to its class;
``error_for(code, message)`` makes the exception, and is what the native
module raises through.  Where a built-in exception means the same thing, the
class derives from it too, so ``except TimeoutError`` or ``except
ValueError`` also work.

hixl.Engine raises :class:`EngineError` subclasses instead, by the engine's
status numbers (``ENGINE_*``, include/hixl/engine.hpp; ``ENGINE_CLASSES``,
``engine_error_for``); ``err.hixl_code`` is the failure's precise HIXL_ERR_*
code.  Where an engine status means the same as a C code, its class is also
that code's class: an engine NotConnectedError is a HixlNotConnectedError, a
RemoteNotRegisteredError (PARAM_INVALID whose code is
HIXL_ERR_NOT_REGISTERED) a NotRegisteredError.

tests/python/test_error_table.py checks these tables against the headers.
"""

from . import _hixl as _native

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


class HixlAlreadyConnectedError(HixlError):
    """HIXL_ERR_ALREADY_CONNECTED: connect to an engine already connected (the engine API raises
    it as hixl.AlreadyConnectedError, a subclass, with the engine's status number as ``code``)."""


# ------------------------------------------------------------------ the engine API
#
# hixl.Engine reports the status numbers of the CANN library's engine API
# (include/hixl/engine.hpp); `code` and `status` are that number.


class EngineError(HixlError):
    """A failure reported by hixl.Engine; ``status`` (also ``code``) is the
    engine status number, ``name`` its name (e.g. ``"NOT_CONNECTED"``) and
    ``hixl_code`` the failure's precise HIXL_ERR_* code (None if unknown)."""

    def __init__(self, status, message, hixl_code=None):
        super().__init__(status, message)
        self.hixl_code = hixl_code

    @property
    def status(self):
        return self.code

    @property
    def name(self):
        return ENGINE_NAMES.get(self.code, "UNKNOWN")

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.hixl_code))


class ParamInvalidError(EngineError, ValueError):
    """PARAM_INVALID: a bad argument, address, range or handle."""


class RemoteNotRegisteredError(ParamInvalidError, NotRegisteredError):
    """PARAM_INVALID for a remote range the peer has not registered (its ``hixl_code`` is
    HIXL_ERR_NOT_REGISTERED; also a NotRegisteredError)."""


class EngineTimeoutError(EngineError, TimeoutError):
    """TIMEOUT: the call's timeout passed (nobody answered, or the transfer was too slow)."""


class NotConnectedError(EngineError, HixlNotConnectedError):
    """NOT_CONNECTED: no connection to that engine, or it went away (also a HixlNotConnectedError,
    hence a ConnectionError)."""


class AlreadyConnectedError(EngineError, HixlAlreadyConnectedError):
    """ALREADY_CONNECTED: connect() to an engine already connected (also a HixlAlreadyConnectedError)."""


class EngineUnsupportedError(EngineError, NotImplementedError):
    """UNSUPPORTED: not available (device memory, a transport not built)."""


class ResourceExhaustedError(EngineError):
    """RESOURCE_EXHAUSTED: the peer's notification queue is full, or memory ran out."""


class EngineFailedError(EngineError, RuntimeError):
    """FAILED: the call failed (a peer died, a call after finalize(), ...)."""


# ------------------------------------------------------------------ the table
#
# Everything below comes from include/hixl/hixl_errors.h through the native
# module; nothing here repeats a number.

# code -> its name in hixl.h (also hixl.strerror(code) up to the colon).
NAMES = {}
# code -> what it means (hixl.strerror(code) after "NAME: ").
DESCRIPTIONS = {}
# code -> the exception class error_for() raises for it.
CLASSES = {}
# code -> the engine status number the engine API returns for it.
ENGINE_STATUS_FOR = {}
# engine status -> its name in engine.hpp (hixl::EngineStatusName).
ENGINE_NAMES = {}
# engine status -> the exception class engine_error_for() raises for it.
ENGINE_CLASSES = {}


def _class_named(name, base, row):
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ImportError(f"hixl.errors: the error table (include/hixl/hixl_errors.h) names the exception class "
                          f"{name} for {row}, but python/hixl/errors.py defines no {base.__name__} subclass of "
                          f"that name")
    return cls


def _build():
    engine_by_name = {}
    for status, name, description, class_name in _native._engine_status_table():
        globals()["ENGINE_" + name] = status
        ENGINE_NAMES[status] = name
        engine_by_name[name] = status
        if class_name != "None":
            ENGINE_CLASSES[status] = _class_named(class_name, EngineError, f"engine status {name} ({status})")
    for code, name, description, engine_name, class_name in _native._error_table():
        constant = "SUCCESS" if code == 0 else name[len("HIXL_"):]
        globals()[constant] = code
        NAMES[code] = name
        DESCRIPTIONS[code] = description
        ENGINE_STATUS_FOR[code] = engine_by_name[engine_name]
        if class_name != "None":
            cls = _class_named(class_name, HixlError, f"{name} ({code})")
            if issubclass(cls, EngineError):
                raise ImportError(f"hixl.errors: {name} names {class_name}, an engine class")
            CLASSES[code] = cls


_build()
del _build

# Shown as hixl.NotRegisteredError (etc.) in tracebacks.
for _cls in (HixlError, EngineError, RemoteNotRegisteredError, *CLASSES.values(), *ENGINE_CLASSES.values()):
    _cls.__module__ = "hixl"
del _cls


def engine_error_for(status, message, code=None):
    """The exception object for an engine status (used by the native module);
    ``code`` is the failure's precise HIXL_ERR_* code, where known."""
    if status == ENGINE_PARAM_INVALID and code == ERR_NOT_REGISTERED:  # noqa: F821 (from the table)
        return RemoteNotRegisteredError(status, message, code)
    return ENGINE_CLASSES.get(status, EngineError)(status, message, code)


def error_for(code, message):
    """The exception object for an error code (used by the native module)."""
    return CLASSES.get(code, HixlError)(code, message)


__all__ = [
    "HixlError", "InvalidArgumentError", "NotInitializedError", "NotRegisteredError",
    "InvalidRankError", "HixlTimeoutError", "PeerFailedError", "NoMemoryError",
    "TransportError", "UnsupportedError", "AlreadyInitializedError", "BootstrapError",
    "InternalError", "QueueFullError", "HixlNotConnectedError", "HixlAlreadyConnectedError",
    "EngineError", "ParamInvalidError", "RemoteNotRegisteredError", "EngineTimeoutError", "NotConnectedError",
    "AlreadyConnectedError", "EngineUnsupportedError", "ResourceExhaustedError", "EngineFailedError",
]
