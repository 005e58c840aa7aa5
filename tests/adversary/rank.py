"""A rank of the job the strangers attack: joins the world, says READY with
every rank's pid on stdout, waits for the driver's word on the fifo
argv[1], then checks that put and get still move the right bytes."""

import sys

import hixl
from job_rank import await_word, finish, join, ready

rank, size, boxes, pids = join()
nxt, prv = (rank + 1) % size, (rank - 1) % size
# One transfer first, and one notification (the control connection: on one
# host a put reads the peer's table from shared memory and connects to
# nothing), so that every connection is made before the attack.
hixl.put(dst_rank=nxt, src_addr=boxes.outbox[:1], dst_addr=boxes.inboxes[nxt])
hixl.notify(nxt, b"hello")
hixl.barrier()
assert [src for src, _ in hixl.get_notifications()] == [prv]
ready(rank, pids)
await_word(rank, sys.argv[1], "go")  # the driver is done
hixl.barrier()
boxes.exchange(dst=nxt, src=prv)
finish(rank)
