"""A rank of the job the strangers attack: joins the world, says READY with
every rank's pid on stdout, waits for the driver's word on the fifo
argv[1], then checks that put and get still move the right bytes."""

import os
import sys

import numpy as np

import hixl

hixl.init()
rank, size = hixl.rank(), hixl.world_size()
N = 4096
inbox = np.zeros(N, dtype=np.int64)
outbox = np.arange(N, dtype=np.int64) + 1000 * rank
hixl.register_memory(inbox)
hixl.register_memory(outbox)
inboxes = hixl.allgather(inbox.ctypes.data)
outboxes = hixl.allgather(outbox.ctypes.data)
pids = hixl.allgather(os.getpid())
nxt, prv = (rank + 1) % size, (rank - 1) % size
# One transfer first, so that every connection is made before the attack.
hixl.put(dst_rank=nxt, src_addr=outbox[:1], dst_addr=inboxes[nxt])
hixl.barrier()
if rank == 0:
    print("READY " + " ".join(str(p) for p in pids), flush=True)
    with open(sys.argv[1]) as go:  # blocks until the driver is done
        assert go.read().strip() == "go"
hixl.barrier()
hixl.put(dst_rank=nxt, src_addr=outbox, dst_addr=inboxes[nxt])
got = np.zeros(N, dtype=np.int64)
hixl.get(src_rank=prv, src_addr=outboxes[prv], dst_addr=got)
hixl.fence()
hixl.barrier()
assert np.array_equal(inbox, np.arange(N, dtype=np.int64) + 1000 * prv), "put delivered wrong bytes"
assert np.array_equal(got, np.arange(N, dtype=np.int64) + 1000 * prv), "get returned wrong bytes"
hixl.barrier()
hixl.finalize()
print(f"rank {rank}: put/get verified", flush=True)
