"""A rank of a 2-rank job (HIXL_SHM_CMA=0: puts to registered memory go
through the shm relay) whose shm sockets strangers attack
(test_shm_socket.py): measures the slowest relayed put+fence before the
attack and during it, maps a new heap block during it (a request on the
shm socket), and checks the bytes.  Rank 0 prints READY with every rank's
pid, then waits for the driver's word on the fifo argv[1]."""

import os
import sys
import time

import numpy as np

import hixl

ROUNDS = 30
N = 16384  # int64s: 128 KiB per put


def relayed_puts(rank, inboxes, outbox, other):
    """The slowest of ROUNDS relayed put+fence, in seconds."""
    worst = 0.0
    for i in range(ROUNDS):
        outbox[0] = i
        t0 = time.monotonic()
        hixl.put(dst_rank=other, src_addr=outbox, dst_addr=inboxes[other])
        hixl.fence()
        worst = max(worst, time.monotonic() - t0)
    return worst


hixl.init()
rank, size = hixl.rank(), hixl.world_size()
assert size == 2, size
other = 1 - rank
inbox = np.zeros(N, dtype=np.int64)
outbox = np.arange(N, dtype=np.int64) + 1000 * rank
hixl.register_memory(inbox)
hixl.register_memory(outbox)
inboxes = hixl.allgather(inbox.ctypes.data)
pids = hixl.allgather(os.getpid())
before = relayed_puts(rank, inboxes, outbox, other)
hixl.barrier()
if rank == 0:
    print("READY " + " ".join(str(p) for p in pids), flush=True)
    with open(sys.argv[1]) as go:  # blocks until the attack is in place
        assert go.read().strip() == "go"
hixl.barrier()
during = relayed_puts(rank, inboxes, outbox, other)
# A heap block made now: the peer's first put into it asks this rank's shm
# socket for the segment (unless an earlier segment holds it).
block = np.frombuffer(hixl.alloc(64 << 20), dtype=np.int64)
block[:] = -1
hixl.barrier()
hixl.put(dst_rank=other, src_addr=outbox, dst_addr=block.ctypes.data)
hixl.fence()
hixl.barrier()
expect = np.arange(N, dtype=np.int64) + 1000 * other
expect[0] = ROUNDS - 1
assert np.array_equal(inbox, expect), "a relayed put delivered wrong bytes"
assert np.array_equal(block[:N], expect), "a heap put delivered wrong bytes"
if rank == 0:
    print(f"RELAYED before {before:.4f} during {during:.4f}", flush=True)
    with open(sys.argv[1]) as go:  # the driver has looked at the descriptors
        assert go.read().strip() == "done"
hixl.barrier()
del block
hixl.finalize()
print(f"rank {rank}: put/get verified", flush=True)
