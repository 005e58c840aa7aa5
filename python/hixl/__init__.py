"""hixl: one-sided put/get between processes, for Python, torch and numpy.

    import torch, hixl
    hixl.init()                                   # joins the world (hixlrun, torchrun, mpirun, srun)
    buf = torch.zeros(1024)
    hixl.register_memory(buf)                     # or (buf.data_ptr(), buf.numel() * 4)
    addrs = hixl.allgather(buf.data_ptr())        # every rank's address
    src = torch.ones(1024)
    hixl.put(dst_rank=(hixl.rank() + 1) % hixl.world_size(),
             src_addr=src, dst_addr=addrs[(hixl.rank() + 1) % hixl.world_size()])  # size: src's bytes
    hixl.fence()                                  # the put is complete
    hixl.barrier()                                # ... and so is everyone's: buf holds ones
    hixl.finalize()

Addresses are ints or objects that expose memory (CPU torch tensors, numpy
arrays, anything with the buffer protocol, hixl.Buffer).  Symmetric memory
from hixl.alloc(n) is a hixl.Buffer that numpy.frombuffer / torch.frombuffer
view without a copy.  An int taken as a local address (put's source, get's
destination, a signal word, an engine block's local side) is checked before
any byte of it is touched: memory registered or allocated through hixl is
found in a table; anything else must be memory this process can read (and
write, where the call writes), or the call raises hixl.InvalidArgumentError
(hixl.ParamInvalidError for hixl.Engine), a ValueError, naming the address.
Failures raise hixl.HixlError subclasses.

A target learns that data arrived without taking part: put_signal() writes
data and then a 64-bit signal word that the target waits on (wait_until,
test); remote atomics (atomic_fetch_add, atomic_compare_swap, ...) work on
64-bit words; notify() queues a small message (get_notifications,
wait_notification).  See docs/python.md.

hixl.Engine is the engine API (the CANN library's shape): engines that start
independently, connect by "ip:port" and move batches of blocks
(transfer_sync, transfer_async), with notifications.  See docs/engine.md.
"""

import atexit as _atexit

from .errors import (  # noqa: F401  (re-exported)
    AlreadyConnectedError,
    AlreadyInitializedError,
    EngineError,
    EngineFailedError,
    EngineTimeoutError,
    EngineUnsupportedError,
    NotConnectedError,
    ParamInvalidError,
    RemoteNotRegisteredError,
    ResourceExhaustedError,
    BootstrapError,
    HixlAlreadyConnectedError,
    HixlError,
    HixlNotConnectedError,
    HixlTimeoutError,
    InternalError,
    InvalidArgumentError,
    InvalidRankError,
    NoMemoryError,
    NotInitializedError,
    NotRegisteredError,
    PeerFailedError,
    QueueFullError,
    TransportError,
    UnsupportedError,
)
from . import errors  # noqa: F401  (the codes and classes: hixl.errors.ERR_TIMEOUT, ...)
from . import _hixl
from ._hixl import (  # noqa: F401  (re-exported)
    CMP_EQ,
    CMP_GE,
    CMP_GT,
    CMP_LE,
    CMP_LT,
    CMP_NE,
    NOTIFY_MAX_BYTES,
    READ,
    WRITE,
    Engine,
    MemType,
    NotifyDesc,
    TransferOp,
    TransferOpDesc,
    TransferReq,
    TransferStatus,
    SIGNAL_ADD,
    SIGNAL_SET,
    Buffer,
    allgather,
    alloc,
    atomic_add,
    atomic_compare_swap,
    atomic_fetch,
    atomic_fetch_add,
    atomic_set,
    atomic_swap,
    barrier,
    broadcast,
    deregister_memory,
    fence,
    finalize,
    free,
    get,
    get_notifications,
    init,
    is_initialized,
    notify,
    put,
    put_signal,
    rank,
    register_memory,
    strerror,
    test,
    wait_notification,
    wait_until,
    world_size,
)

__version__ = _hixl.__version__

# At interpreter exit without finalize() the process's memory goes with it:
# blocks are then not freed one by one (which would talk to peers).
_atexit.register(_hixl._at_exit)

__all__ = [
    "init", "finalize", "is_initialized", "rank", "world_size",
    "alloc", "free", "Buffer", "register_memory", "deregister_memory",
    "put", "get", "fence", "barrier", "allgather", "broadcast", "strerror",
    "put_signal", "wait_until", "test", "SIGNAL_SET", "SIGNAL_ADD",
    "CMP_EQ", "CMP_NE", "CMP_GT", "CMP_GE", "CMP_LT", "CMP_LE",
    "atomic_fetch", "atomic_set", "atomic_add", "atomic_fetch_add", "atomic_swap", "atomic_compare_swap",
    "notify", "get_notifications", "wait_notification", "NOTIFY_MAX_BYTES",
    "HixlError", "InvalidArgumentError", "NotInitializedError", "NotRegisteredError",
    "InvalidRankError", "HixlTimeoutError", "PeerFailedError", "NoMemoryError",
    "TransportError", "UnsupportedError", "AlreadyInitializedError", "BootstrapError",
    "InternalError", "QueueFullError", "HixlNotConnectedError", "HixlAlreadyConnectedError",
    "errors",
    "Engine", "READ", "WRITE", "TransferOp", "TransferOpDesc", "TransferReq", "TransferStatus", "MemType",
    "NotifyDesc", "EngineError", "ParamInvalidError", "RemoteNotRegisteredError", "EngineTimeoutError",
    "NotConnectedError", "AlreadyConnectedError", "EngineUnsupportedError", "ResourceExhaustedError",
    "EngineFailedError",
]
