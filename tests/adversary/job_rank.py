"""What every rank of an attacked job does (rank.py, rank_loop.py): joins
the world with an inbox and an outbox registered, tells the driver it is
ready, waits for the driver's word, and checks that put and get still move
the right bytes."""

import os

import numpy as np

import hixl

N = 4096


class Boxes:
    """This rank's registered inbox and outbox, and every rank's addresses."""

    def __init__(self, rank, n=N):
        self.rank = rank
        self.inbox = np.zeros(n, dtype=np.int64)
        self.outbox = np.arange(n, dtype=np.int64) + 1000 * rank
        hixl.register_memory(self.inbox)
        hixl.register_memory(self.outbox)
        self.inboxes = hixl.allgather(self.inbox.ctypes.data)
        self.outboxes = hixl.allgather(self.outbox.ctypes.data)

    def exchange(self, dst, src):
        """Puts the outbox into dst's inbox, gets src's outbox, and asserts
        that both arrived intact (src put into this rank's inbox)."""
        hixl.put(dst_rank=dst, src_addr=self.outbox, dst_addr=self.inboxes[dst])
        got = np.zeros(N, dtype=np.int64)
        hixl.get(src_rank=src, src_addr=self.outboxes[src], dst_addr=got)
        hixl.fence()
        hixl.barrier()
        expected = np.arange(N, dtype=np.int64) + 1000 * src
        assert np.array_equal(self.inbox, expected), "put delivered wrong bytes"
        assert np.array_equal(got, expected), "get returned wrong bytes"


def join(n=N):
    """hixl.init, then (rank, world size, Boxes of n int64s, every rank's pid)."""
    hixl.init()
    rank = hixl.rank()
    boxes = Boxes(rank, n)
    return rank, hixl.world_size(), boxes, hixl.allgather(os.getpid())


def ready(rank, pids):
    """Rank 0 prints READY and every rank's pid for the driver."""
    if rank == 0:
        print("READY " + " ".join(str(p) for p in pids), flush=True)


def await_word(rank, fifo, word):
    """Rank 0 blocks until the driver writes `word` to the fifo."""
    if rank == 0:
        with open(fifo) as f:
            assert f.read().strip() == word


def finish(rank):
    hixl.barrier()
    hixl.finalize()
    print(f"rank {rank}: put/get verified", flush=True)
