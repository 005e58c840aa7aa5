"""A rank that leaves without finalize: the survivor's next collective
raises PeerFailedError naming it (run under hixlrun -n 2 with a long
HIXL_TIMEOUT_MS, so that it is the failure, not the timeout, that ends the
wait)."""

import os

import pytest

import hixl


def test_peer_failure_is_reported():
    hixl.init()
    rank, size = hixl.rank(), hixl.world_size()
    assert size == 2, "run with hixlrun -n 2"
    hixl.barrier()
    if rank == 1:
        print("\nrank 1: leaving on purpose, without hixl.finalize()", flush=True)
        os._exit(0)
    with pytest.raises(hixl.PeerFailedError) as e:
        hixl.barrier()
    assert e.value.code == hixl.errors.ERR_PEER_FAILED
    assert "rank 1" in str(e.value)
    assert isinstance(e.value, ConnectionError)
    # finalize reports the failure too, and the world is gone afterwards.
    with pytest.raises(hixl.PeerFailedError):
        hixl.finalize()
    assert not hixl.is_initialized()
    with pytest.raises(hixl.NotInitializedError):
        hixl.barrier()
