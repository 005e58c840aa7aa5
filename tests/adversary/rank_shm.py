"""A rank of a 2-rank job (HIXL_SHM_CMA=0: puts to registered memory go
through the shm relay) whose shm sockets strangers attack
(test_shm_socket.py): measures the slowest relayed put+fence before the
attack and during it, maps a new heap block during it (a request on the
shm socket), and checks the bytes.  Rank 0 prints READY with every rank's
pid, then waits for the driver's word on the fifo argv[1]."""

import sys
import time

import numpy as np

import hixl
from job_rank import await_word, finish, join, ready

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


rank, size, boxes, pids = join(N)
assert size == 2, size
other = 1 - rank
before = relayed_puts(rank, boxes.inboxes, boxes.outbox, other)
hixl.barrier()
ready(rank, pids)
await_word(rank, sys.argv[1], "go")  # the attack is in place
hixl.barrier()
during = relayed_puts(rank, boxes.inboxes, boxes.outbox, other)
# A heap block made now: the peer's first put into it asks this rank's shm
# socket for the segment (unless an earlier segment holds it).
block = np.frombuffer(hixl.alloc(64 << 20), dtype=np.int64)
block[:] = -1
hixl.barrier()
hixl.put(dst_rank=other, src_addr=boxes.outbox, dst_addr=block.ctypes.data)
hixl.fence()
hixl.barrier()
expect = np.arange(N, dtype=np.int64) + 1000 * other
expect[0] = ROUNDS - 1
assert np.array_equal(boxes.inbox, expect), "a relayed put delivered wrong bytes"
assert np.array_equal(block[:N], expect), "a heap put delivered wrong bytes"
if rank == 0:
    print(f"RELAYED before {before:.4f} during {during:.4f}", flush=True)
await_word(rank, sys.argv[1], "done")  # the driver has looked at the descriptors
del block
finish(rank)
