"""init and finalize, and NotInitializedError before the one and after the
other (every rank runs the tests in this order; run under hixlrun)."""

import numpy as np
import pytest
import torch

import hixl

CALLS = {
    "rank": lambda: hixl.rank(),
    "world_size": lambda: hixl.world_size(),
    "alloc": lambda: hixl.alloc(64),
    "free": lambda: hixl.free(0x1000),
    "register_memory": lambda: hixl.register_memory(torch.zeros(4)),
    "deregister_memory": lambda: hixl.deregister_memory(0x1000),
    "put": lambda: hixl.put(dst_rank=0, src_addr=np.zeros(4), dst_addr=0x1000),
    "get": lambda: hixl.get(src_rank=0, src_addr=0x1000, dst_addr=np.zeros(4)),
    "fence": lambda: hixl.fence(),
    "barrier": lambda: hixl.barrier(),
    "allgather": lambda: hixl.allgather(1),
    "finalize": lambda: hixl.finalize(),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_before_init(name):
    assert not hixl.is_initialized()
    with pytest.raises(hixl.NotInitializedError) as e:
        CALLS[name]()
    assert e.value.code == hixl.errors.ERR_NOT_INITIALIZED
    assert "before hixl.init()" in str(e.value)


def test_init_use_finalize():
    hixl.init()
    assert hixl.is_initialized()
    rank, size = hixl.rank(), hixl.world_size()
    assert hixl.allgather(rank) == list(range(size))
    buf = hixl.alloc(1024)
    view = np.frombuffer(buf, dtype=np.int32)
    view[:] = rank
    hixl.barrier()
    got = np.zeros(256, dtype=np.int32)
    hixl.get(src_rank=(rank + 1) % size, src_addr=buf, dst_addr=got)
    hixl.fence()
    assert (got == (rank + 1) % size).all()
    hixl.barrier()
    # `view` outlives finalize: it keeps the block's last contents (with a warning).
    with pytest.warns(RuntimeWarning, match="private copy"):
        hixl.finalize()
    assert not hixl.is_initialized()
    assert buf.freed and (view == rank).all()
    view[:] = 7  # still writable memory of this process


@pytest.mark.parametrize("name", list(CALLS))
def test_after_finalize(name):
    with pytest.raises(hixl.NotInitializedError) as e:
        CALLS[name]()
    assert ("after hixl.finalize()" in str(e.value)) or ("called twice" in str(e.value))
