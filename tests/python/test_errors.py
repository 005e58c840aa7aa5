"""Each hixl error class, raised where it should be, with the library's code
and message.  Every rank runs every test (the collectives match); the
failing calls are all local, so no rank waits for another's mistake.

(NotInitializedError before init / after finalize: test_lifecycle.py;
PeerFailedError: test_faults.py; HixlTimeoutError: test_standalone.py.)
"""

import pickle

import numpy as np
import pytest
import torch

import hixl
from hixl import errors


@pytest.fixture(scope="module")
def peer_memory(world):
    """A registered tensor on every rank and everyone's address."""
    t = torch.zeros(256)
    hixl.register_memory(t)
    addrs = hixl.allgather(t.data_ptr())
    hixl.barrier()
    yield t, addrs
    hixl.barrier()
    hixl.deregister_memory(t)


def test_class_hierarchy():
    for cls in (hixl.InvalidArgumentError, hixl.NotInitializedError, hixl.NotRegisteredError,
                hixl.InvalidRankError, hixl.HixlTimeoutError, hixl.PeerFailedError, hixl.NoMemoryError,
                hixl.TransportError, hixl.UnsupportedError, hixl.AlreadyInitializedError,
                hixl.BootstrapError, hixl.InternalError):
        assert issubclass(cls, hixl.HixlError)
    assert issubclass(hixl.HixlTimeoutError, TimeoutError)
    assert issubclass(hixl.InvalidArgumentError, ValueError)
    assert issubclass(hixl.InvalidRankError, ValueError)
    assert issubclass(hixl.PeerFailedError, ConnectionError)
    assert issubclass(hixl.NoMemoryError, MemoryError)
    assert issubclass(hixl.UnsupportedError, NotImplementedError)
    assert hixl.NotRegisteredError.__module__ == "hixl"


def test_not_registered(world, peer_memory):
    _, addrs = peer_memory
    unregistered = 0x1000  # never registered anywhere
    with pytest.raises(hixl.NotRegisteredError) as e:
        hixl.put(dst_rank=world.next, src_addr=torch.ones(4), dst_addr=unregistered)
    err = e.value
    assert err.code == errors.ERR_NOT_REGISTERED == -3
    assert err.name == "HIXL_ERR_NOT_REGISTERED"
    assert str(err).startswith("Remote memory not registered")
    assert f"rank {world.next}" in str(err) and "0x1000" in str(err)
    with pytest.raises(hixl.NotRegisteredError):
        hixl.get(src_rank=world.prev, src_addr=unregistered, dst_addr=torch.empty(4))
    # One byte past the end of a registered region.
    with pytest.raises(hixl.NotRegisteredError):
        hixl.put(dst_rank=world.next, src_addr=torch.ones(2), dst_addr=addrs[world.next] + 255 * 4)
    # Nothing was written: the next rank's tensor is still zero.
    hixl.barrier()
    assert peer_memory[0].sum() == 0


def test_invalid_rank(world, peer_memory):
    _, addrs = peer_memory
    for bad in (world.size, -1, world.size + 100):
        with pytest.raises(hixl.InvalidRankError) as e:
            hixl.put(dst_rank=bad, src_addr=torch.ones(4), dst_addr=addrs[0])
        assert e.value.code == errors.ERR_INVALID_RANK and f"rank {bad}" in str(e.value)
        with pytest.raises(hixl.InvalidRankError):
            hixl.get(src_rank=bad, src_addr=addrs[0], dst_addr=torch.empty(4))


def test_invalid_arguments(world, peer_memory):
    t, addrs = peer_memory
    dst = addrs[world.next]
    read_only = np.zeros(4)
    read_only.setflags(write=False)
    cases = [
        lambda: hixl.register_memory(0, 16),                       # NULL
        lambda: hixl.register_memory(torch.zeros(4), 0),           # size 0
        lambda: hixl.register_memory(torch.zeros(4), 17),          # larger than the tensor
        lambda: hixl.register_memory(b"read-only bytes"),          # peers would write into it
        lambda: hixl.register_memory(12345),                       # an int needs a size
        lambda: hixl.put(world.next, torch.ones(4), dst, size=17),  # larger than the source
        lambda: hixl.put(world.next, 1234, dst),                   # two ints need a size
        lambda: hixl.put(world.next, "a string", dst),             # not memory
        lambda: hixl.put(world.next, torch.ones(4), dst, size=-1),
        lambda: hixl.put(world.next, torch.ones(4, 4)[:, 0], dst),  # not contiguous
        lambda: hixl.put(world.next, np.ones(8)[::2], dst),          # not contiguous
        lambda: hixl.put(world.next, torch.ones(4), torch.zeros(4)),  # local memory as a remote address
        lambda: hixl.get(world.prev, dst, b"immutable"),             # a read-only destination
        lambda: hixl.get(world.prev, dst, read_only),
        lambda: hixl.alloc(0),
        lambda: hixl.alloc(-5),
        lambda: hixl.free(12345),                                   # not from hixl.alloc
        lambda: hixl.free("x"),
        lambda: hixl.deregister_memory(0),
        lambda: hixl.allgather(3.5),
        lambda: hixl.allgather(2**64),
    ]
    for i, case in enumerate(cases):
        with pytest.raises(hixl.InvalidArgumentError) as e:
            case()
        assert e.value.code == errors.ERR_INVALID_ARG, i
        assert isinstance(e.value, ValueError)
        assert str(e.value), i
    hixl.barrier()
    assert t.sum() == 0  # nothing was written anywhere


def test_deregister_unknown_memory(world):
    # Deregistering what was never registered.
    with pytest.raises(hixl.HixlError) as e:
        hixl.deregister_memory(torch.zeros(4))
    assert e.value.code in (errors.ERR_INVALID_ARG, errors.ERR_NOT_REGISTERED)


def test_allgather_kinds_must_match(world):
    # Every rank sees the mismatch and raises the same error: no rank hangs.
    mine = world.rank if world.rank % 2 == 0 else b"bytes"
    if world.size == 1:
        pytest.skip("needs two ranks")
    with pytest.raises(hixl.InvalidArgumentError, match="different kinds"):
        hixl.allgather(mine)
    assert hixl.allgather(world.rank) == list(range(world.size))  # and the next one works


def test_already_initialized(world):
    with pytest.raises(hixl.AlreadyInitializedError) as e:
        hixl.init()
    assert e.value.code == errors.ERR_ALREADY_INITIALIZED
    assert hixl.is_initialized() and hixl.rank() == world.rank  # still usable


def test_unsupported_device(world, peer_memory):
    _, addrs = peer_memory
    meta = torch.empty(4, device="meta")  # not CPU memory
    with pytest.raises(hixl.UnsupportedError, match="only CPU"):
        hixl.put(world.next, meta, addrs[world.next])


def test_error_objects():
    err = hixl.NotRegisteredError(-3, "Remote memory not registered: test")
    assert err.code == -3 and err.message == "Remote memory not registered: test"
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is hixl.NotRegisteredError and again.code == -3 and str(again) == str(err)
    assert hixl.strerror(-5).startswith("HIXL_ERR_TIMEOUT")
    assert hixl.strerror(0).startswith("HIXL_SUCCESS")
