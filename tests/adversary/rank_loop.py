"""A rank of a 2-rank job that slow, idle and half-open strangers attack
(test_event_loop.py): measures the notify round trip between the ranks
before the attack and during it, and checks that put and get still move
the right bytes.  Rank 0 prints READY with every rank's pid, then waits for
the driver's word on the fifo argv[1] (the attack is in place by then)."""

import os
import sys
import time

import numpy as np

import hixl

ROUNDS = 20


def ping_pong(rank):
    """The slowest of ROUNDS notify round trips, in seconds (rank 0's view)."""
    worst = 0.0
    for i in range(ROUNDS):
        t0 = time.monotonic()
        if rank == 0:
            hixl.notify(1, b"ping %d" % i)
            src, data = hixl.wait_notification(timeout_ms=30000)
            assert src == 1 and data == b"pong %d" % i, (src, data)
        else:
            src, data = hixl.wait_notification(timeout_ms=30000)
            assert src == 0 and data == b"ping %d" % i, (src, data)
            hixl.notify(0, b"pong %d" % i)
        worst = max(worst, time.monotonic() - t0)
    return worst


hixl.init()
rank, size = hixl.rank(), hixl.world_size()
assert size == 2, size
N = 4096
inbox = np.zeros(N, dtype=np.int64)
outbox = np.arange(N, dtype=np.int64) + 1000 * rank
hixl.register_memory(inbox)
hixl.register_memory(outbox)
inboxes = hixl.allgather(inbox.ctypes.data)
outboxes = hixl.allgather(outbox.ctypes.data)
pids = hixl.allgather(os.getpid())
other = 1 - rank
before = ping_pong(rank)
hixl.barrier()
if rank == 0:
    print("READY " + " ".join(str(p) for p in pids), flush=True)
    with open(sys.argv[1]) as go:  # blocks until the attack is in place
        assert go.read().strip() == "go"
hixl.barrier()
during = ping_pong(rank)
hixl.put(dst_rank=other, src_addr=outbox, dst_addr=inboxes[other])
got = np.zeros(N, dtype=np.int64)
hixl.get(src_rank=other, src_addr=outboxes[other], dst_addr=got)
hixl.fence()
hixl.barrier()
assert np.array_equal(inbox, np.arange(N, dtype=np.int64) + 1000 * other), "put delivered wrong bytes"
assert np.array_equal(got, np.arange(N, dtype=np.int64) + 1000 * other), "get returned wrong bytes"
if rank == 0:
    print(f"ROUNDTRIP before {before:.4f} during {during:.4f}", flush=True)
    with open(sys.argv[1]) as go:  # the driver has looked at the descriptors
        assert go.read().strip() == "done"
hixl.barrier()
hixl.finalize()
print(f"rank {rank}: put/get verified", flush=True)
