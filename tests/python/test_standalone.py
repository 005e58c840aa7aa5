"""hixl in a single process (not under hixlrun): a world of one, and what a
rank sees when the others never come (HixlTimeoutError)."""

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import hixl


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(code, rank, world_size, port, timeout_ms):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), HIXL_TIMEOUT_MS=str(timeout_ms), HIXL_LOG_LEVEL="error")
    for var in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "HIXL_LAUNCHER"):
        env.pop(var, None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


TIMEOUT_PROBE = """
    import time, hixl
    start = time.monotonic()
    try:
        hixl.init()
    except hixl.HixlTimeoutError as e:
        assert isinstance(e, TimeoutError) and e.code == hixl.errors.ERR_TIMEOUT
        print("timed out after %.1f s: %s" % (time.monotonic() - start, e))
        raise SystemExit(0)
    raise SystemExit("init returned although the other rank never came")
"""


@pytest.mark.parametrize("rank", [0, 1])
def test_init_times_out_when_a_peer_never_comes(rank):
    """Rank 0 of 2 waits for rank 1; rank 1 of 2 for rank 0's store.  Both
    give up after HIXL_TIMEOUT_MS with HixlTimeoutError."""
    r = run_rank(TIMEOUT_PROBE, rank, 2, free_port(), 1500)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "timed out after" in r.stdout
    assert float(r.stdout.split("after ")[1].split(" s")[0]) < 30


def test_world_of_one():
    assert not hixl.is_initialized()
    hixl.init()
    assert (hixl.rank(), hixl.world_size()) == (0, 1)
    assert hixl.allgather(42) == [42] and hixl.allgather(b"x") == [b"x"]
    buf = hixl.alloc(4096)
    arr = buf.numpy(np.float64)
    arr[:] = np.arange(512)
    t = torch.empty(512, dtype=torch.float64)
    hixl.get(src_rank=0, src_addr=buf, dst_addr=t)   # a get from oneself
    hixl.fence()
    assert torch.equal(t, torch.arange(512, dtype=torch.float64))
    with pytest.warns(RuntimeWarning, match="private copy"):
        hixl.finalize()
    assert arr[511] == 511                           # the view outlived finalize with its contents
    # A world can be joined again after finalize.
    hixl.init()
    again = hixl.alloc(64)
    assert not again.freed and again.nbytes == 64
    hixl.free(again)
    hixl.finalize()
    assert not hixl.is_initialized()


def test_rank0_never_falls_back_to_every_interface():
    """A MASTER_ADDR that is not an address of rank 0's host is an error that
    names it, never a store listening on 0.0.0.0 instead."""
    code = """
        import os, hixl
        os.environ["MASTER_ADDR"] = "203.0.113.7"   # TEST-NET-3: no host's address here
        try:
            hixl.init()
        except hixl.HixlError as e:
            print("refused:", e)
            raise SystemExit(0)
        raise SystemExit("init succeeded on an address of another host")
    """
    r = run_rank(code, 0, 2, free_port(), 3000)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "203.0.113.7" in r.stdout and "cannot host the store" in r.stdout, r.stdout


def test_store_fd_that_is_not_a_listening_socket_is_refused():
    """HIXL_STORE_FD (set by hixlrun for rank 0) must name a listening TCP
    socket on MASTER_PORT; anything else is an error naming it."""
    code = """
        import os, hixl
        r, w = os.pipe()
        os.environ["HIXL_STORE_FD"] = str(r)
        try:
            hixl.init()
        except hixl.HixlError as e:
            print("refused:", e)
            raise SystemExit(0)
        raise SystemExit("init accepted a pipe as the store's socket")
    """
    r = run_rank(code, 0, 2, free_port(), 3000)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "HIXL_STORE_FD" in r.stdout and "not a" in r.stdout, r.stdout
