"""A rank of a 2-rank job that slow, idle and half-open strangers attack
(test_event_loop.py): measures the notify round trip between the ranks
before the attack and during it, and checks that put and get still move
the right bytes.  Rank 0 prints READY with every rank's pid, then waits for
the driver's word on the fifo argv[1] (the attack is in place by then)."""

import sys
import time

import hixl
from job_rank import await_word, finish, join, ready

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


rank, size, boxes, pids = join()
assert size == 2, size
other = 1 - rank
before = ping_pong(rank)
hixl.barrier()
ready(rank, pids)
await_word(rank, sys.argv[1], "go")  # the attack is in place
hixl.barrier()
during = ping_pong(rank)
boxes.exchange(dst=other, src=other)
if rank == 0:
    print(f"ROUNDTRIP before {before:.4f} during {during:.4f}", flush=True)
await_word(rank, sys.argv[1], "done")  # the driver has looked at the descriptors
finish(rank)
