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
view without a copy.  Failures raise hixl.HixlError subclasses.  See
docs/python.md.
"""

import atexit as _atexit

from ._errors import (  # noqa: F401  (re-exported)
    AlreadyInitializedError,
    BootstrapError,
    HixlError,
    HixlTimeoutError,
    InternalError,
    InvalidArgumentError,
    InvalidRankError,
    NoMemoryError,
    NotInitializedError,
    NotRegisteredError,
    PeerFailedError,
    TransportError,
    UnsupportedError,
)
from . import _errors as errors  # noqa: F401  (re-exported: the codes, hixl.errors.ERR_TIMEOUT, ...)
from . import _hixl
from ._hixl import (  # noqa: F401  (re-exported)
    Buffer,
    allgather,
    alloc,
    barrier,
    deregister_memory,
    fence,
    finalize,
    free,
    get,
    init,
    is_initialized,
    put,
    rank,
    register_memory,
    strerror,
    world_size,
)

__version__ = _hixl.__version__

# At interpreter exit without finalize() the process's memory goes with it:
# blocks are then not freed one by one (which would talk to peers).
_atexit.register(_hixl._at_exit)

__all__ = [
    "init", "finalize", "is_initialized", "rank", "world_size",
    "alloc", "free", "Buffer", "register_memory", "deregister_memory",
    "put", "get", "fence", "barrier", "allgather", "strerror",
    "HixlError", "InvalidArgumentError", "NotInitializedError", "NotRegisteredError",
    "InvalidRankError", "HixlTimeoutError", "PeerFailedError", "NoMemoryError",
    "TransportError", "UnsupportedError", "AlreadyInitializedError", "BootstrapError",
    "InternalError", "errors",
]
