"""Every function of the hixl package with torch tensors, numpy arrays, raw
addresses and other buffer-protocol objects, in a world of any size (run
alone it is a world of one, where the peer is the rank itself).

Each rank puts into the next rank and gets from the previous one.
"""

import array
import ctypes
import gc
import os
import threading
import time

import numpy as np
import pytest
import torch

import hixl

N = 4096


def test_rank_and_size(world):
    assert 0 <= world.rank < world.size
    assert world.size == int(os.environ.get("WORLD_SIZE", "1"))
    assert hixl.rank() == world.rank and hixl.world_size() == world.size
    assert hixl.is_initialized()


def test_allgather_ints(world):
    assert hixl.allgather(world.rank * 10) == [r * 10 for r in range(world.size)]
    assert hixl.allgather(-1 - world.rank) == [-1 - r for r in range(world.size)]
    assert hixl.allgather(2**64 - 1) == [2**64 - 1] * world.size
    assert hixl.allgather(-(2**63)) == [-(2**63)] * world.size
    assert hixl.allgather(np.uint64(7)) == [7] * world.size  # numpy integers count as ints


def test_allgather_bytes(world):
    mine = bytes([65 + world.rank]) * (world.rank + 1)  # different lengths on every rank
    assert hixl.allgather(mine) == [bytes([65 + r]) * (r + 1) for r in range(world.size)]
    assert hixl.allgather(b"") == [b""] * world.size
    assert hixl.allgather(bytearray(b"xy")) == [b"xy"] * world.size
    got = hixl.allgather(np.array([world.rank], dtype=np.int32))  # any bytes-like object
    assert [int(np.frombuffer(g, dtype=np.int32)[0]) for g in got] == list(range(world.size))


def test_broadcast_in_place(world):
    # A tensor from each root in turn (torch.distributed.broadcast's shape),
    # larger than one round of the scratch, so it goes in chunks.
    for root in range(world.size):
        t = torch.arange(50_000, dtype=torch.float32) * (root + 1) if world.rank == root else torch.zeros(50_000)
        hixl.broadcast(t, root=root)
        assert torch.equal(t, torch.arange(50_000, dtype=torch.float32) * (root + 1))
    a = np.full(3, world.rank, dtype=np.int64)
    hixl.broadcast(a)  # root defaults to 0
    assert a.tolist() == [0, 0, 0]
    b = bytearray(b"root") if world.rank == 0 else bytearray(4)
    hixl.broadcast(b, 0)
    assert bytes(b) == b"root"
    with pytest.raises(hixl.InvalidRankError, match="root"):
        hixl.broadcast(bytearray(1), root=world.size)
    with pytest.raises(hixl.InvalidArgumentError, match="writable"):
        hixl.broadcast(b"read-only")
    hixl.barrier()


def test_put_get_torch_tensors(world):
    inbox = torch.zeros(N)                                # peers put here
    outbox = torch.full((N,), float(world.rank + 1))     # peers get from here
    hixl.register_memory(inbox)                           # the size defaults to the tensor's
    hixl.register_memory(outbox.data_ptr(), outbox.numel() * 4)
    inboxes = hixl.allgather(inbox.data_ptr())
    outboxes = hixl.allgather(outbox.data_ptr())

    src = torch.arange(N, dtype=torch.float32) + 1000 * world.rank
    hixl.put(dst_rank=world.next, src_addr=src, dst_addr=inboxes[world.next])
    got = torch.empty(N)
    hixl.get(src_rank=world.prev, src_addr=outboxes[world.prev], dst_addr=got)
    hixl.fence()
    assert torch.equal(got, torch.full((N,), float(world.prev + 1)))
    hixl.barrier()
    assert torch.equal(inbox, torch.arange(N, dtype=torch.float32) + 1000 * world.prev)
    hixl.barrier()                           # everyone has checked before anyone writes again

    # Part of a buffer: an explicit size, an offset into the peer's buffer,
    # a view of a tensor as the source and another as the destination.
    hixl.put(dst_rank=world.next, src_addr=src[100:110], dst_addr=inboxes[world.next] + 8 * 4, size=2 * 4)
    part = torch.zeros(20)
    hixl.get(src_rank=world.prev, src_addr=outboxes[world.prev] + 4, dst_addr=part[5:], size=3 * 4)
    hixl.barrier()
    assert inbox[8:10].tolist() == [100 + 1000 * world.prev, 101 + 1000 * world.prev]
    assert inbox[10] == 10 + 1000 * world.prev
    assert part[5:8].tolist() == [world.prev + 1] * 3 and part[:5].sum() == 0 and part[8:].sum() == 0

    # Other dtypes and shapes: the size is numel() * element_size().
    grid = torch.arange(6 * 7, dtype=torch.int64).reshape(6, 7) * (world.rank + 1)
    hixl.register_memory(grid)
    grids = hixl.allgather(grid.data_ptr())
    hixl.barrier()
    mirror = torch.empty(6, 7, dtype=torch.int64)
    hixl.get(world.prev, grids[world.prev], mirror)  # positional arguments
    hixl.fence()
    assert torch.equal(mirror, torch.arange(42, dtype=torch.int64).reshape(6, 7) * (world.prev + 1))
    hixl.barrier()
    for t in (inbox, outbox, grid):
        hixl.deregister_memory(t)
    hixl.barrier()


def test_put_get_numpy_arrays(world):
    inbox = np.zeros(N, dtype=np.float64)
    outbox = np.arange(N, dtype=np.int32) * (world.rank + 1)
    hixl.register_memory(inbox)
    hixl.register_memory(outbox)
    inboxes = hixl.allgather(inbox.ctypes.data)
    outboxes = hixl.allgather(outbox.ctypes.data)

    hixl.put(dst_rank=world.next, src_addr=np.full(N, world.rank + 0.25), dst_addr=inboxes[world.next])
    got = np.zeros(N, dtype=np.int32)
    hixl.get(src_rank=world.prev, src_addr=outboxes[world.prev], dst_addr=got)
    hixl.fence()
    assert (got == np.arange(N, dtype=np.int32) * (world.prev + 1)).all()
    hixl.barrier()
    assert (inbox == world.prev + 0.25).all()

    # A 2-D array and a contiguous slice as destination.
    block = np.zeros((4, 8), dtype=np.int32)
    hixl.get(src_rank=world.prev, src_addr=outboxes[world.prev], dst_addr=block[1:3])  # 16 int32
    hixl.fence()
    assert (block[1:3].ravel() == np.arange(16) * (world.prev + 1)).all() and block[0].sum() == 0
    hixl.barrier()
    hixl.deregister_memory(inbox)
    hixl.deregister_memory(outbox.ctypes.data)  # by address works as well
    hixl.barrier()


def test_put_get_raw_addresses(world):
    inbox = (ctypes.c_uint8 * N)()
    outbox = (ctypes.c_uint8 * N).from_buffer_copy(bytes([world.rank % 256]) * N)
    hixl.register_memory(ctypes.addressof(inbox), N)
    hixl.register_memory(ctypes.addressof(outbox), N)
    inboxes = hixl.allgather(ctypes.addressof(inbox))
    outboxes = hixl.allgather(ctypes.addressof(outbox))

    src = (ctypes.c_uint8 * N).from_buffer_copy(bytes([(world.rank + 7) % 256]) * N)
    hixl.put(dst_rank=world.next, src_addr=ctypes.addressof(src), dst_addr=inboxes[world.next], size=N)
    dst = (ctypes.c_uint8 * N)()
    hixl.get(src_rank=world.prev, src_addr=outboxes[world.prev], dst_addr=ctypes.addressof(dst), size=N)
    hixl.fence()
    assert bytes(dst) == bytes([world.prev % 256]) * N
    hixl.barrier()
    assert bytes(inbox) == bytes([(world.prev + 7) % 256]) * N
    hixl.deregister_memory(ctypes.addressof(inbox))
    hixl.deregister_memory(ctypes.addressof(outbox))
    hixl.barrier()


def test_put_get_buffer_protocol_objects(world):
    inbox = bytearray(N)
    hixl.register_memory(inbox)
    inboxes = hixl.allgather(np.frombuffer(inbox, dtype=np.uint8).ctypes.data)
    # bytes (read-only: fine as a source), array.array, memoryview slices.
    hixl.put(dst_rank=world.next, src_addr=bytes([world.rank + 1]) * 100, dst_addr=inboxes[world.next])
    hixl.put(dst_rank=world.next, src_addr=array.array("d", [world.rank + 0.5] * 4),
             dst_addr=inboxes[world.next] + 200)
    hixl.barrier()
    assert inbox[:100] == bytes([world.prev + 1]) * 100
    assert array.array("d", inbox[200:232]).tolist() == [world.prev + 0.5] * 4
    out = bytearray(10)
    hixl.get(src_rank=world.prev, src_addr=inboxes[world.prev], dst_addr=memoryview(out)[2:6])
    hixl.fence()
    pp = (world.rank - 2) % world.size       # prev's inbox holds what prev's prev put
    assert out == bytearray(2) + bytes([pp + 1]) * 4 + bytearray(4)
    hixl.barrier()
    hixl.deregister_memory(inbox)
    hixl.barrier()


def test_alloc_is_symmetric_and_zero_copy(world):
    buf = hixl.alloc(N * 4)
    assert isinstance(buf, hixl.Buffer) and buf.nbytes == N * 4 and len(buf) == N * 4
    assert hixl.allgather(buf.addr) == [buf.addr] * world.size  # the same address everywhere

    a = np.frombuffer(buf, dtype=np.float32)        # numpy view, no copy
    t = torch.frombuffer(buf, dtype=torch.float32)  # torch view, no copy
    assert a.ctypes.data == buf.addr and t.data_ptr() == buf.addr
    assert buf.views == 2
    a[:] = np.arange(N, dtype=np.float32) + world.rank   # write through numpy ...
    assert torch.equal(t, torch.arange(N, dtype=torch.float32) + world.rank)  # ... read through torch
    also = buf.numpy(np.float32)
    assert also.ctypes.data == buf.addr and buf.tensor(torch.float32).data_ptr() == buf.addr
    hixl.barrier()

    # A peer reads it with get: the Buffer itself names the remote (symmetric) address.
    got = torch.empty(N)
    hixl.get(src_rank=world.prev, src_addr=buf, dst_addr=got)
    hixl.fence()
    assert torch.equal(got, torch.arange(N, dtype=torch.float32) + world.prev)
    hixl.barrier()

    # Puts into a peer's block, addressed by the Buffer, by a view of it, or by its int address.
    hixl.put(dst_rank=world.next, src_addr=torch.full((4,), -1.0 - world.rank), dst_addr=buf)
    hixl.put(dst_rank=world.next, src_addr=np.full(4, -10.0 - world.rank, dtype=np.float32), dst_addr=t[8:12])
    hixl.put(dst_rank=world.next, src_addr=np.full(4, -20.0 - world.rank, dtype=np.float32),
             dst_addr=buf.addr + 16 * 4)
    hixl.barrier()
    assert a[:4].tolist() == [-1.0 - world.prev] * 4
    assert t[8:12].tolist() == [-10.0 - world.prev] * 4
    assert also[16:20].tolist() == [-20.0 - world.prev] * 4
    hixl.barrier()

    del a, t, also
    gc.collect()
    assert buf.views == 0
    hixl.free(buf)
    assert buf.freed


def test_free_rules(world):
    buf = hixl.alloc(1024)
    view = np.frombuffer(buf, dtype=np.uint8)
    with pytest.raises(hixl.InvalidArgumentError, match="view"):
        hixl.free(buf)                       # refused: `view` would dangle
    assert not buf.freed
    view[:] = 3
    tensor = torch.frombuffer(buf, dtype=torch.uint8)
    del view
    with pytest.raises(hixl.InvalidArgumentError, match="view"):
        buf.free()                           # refused: `tensor` would dangle
    del tensor
    buf.free()
    assert buf.freed and buf.views == 0
    with pytest.raises(hixl.InvalidArgumentError, match="already freed"):
        hixl.free(buf)
    with pytest.raises(hixl.InvalidArgumentError):
        buf.addr
    with pytest.raises(hixl.InvalidArgumentError):
        memoryview(buf)

    # free() also takes the address; `with` frees at the end of the block.
    other = hixl.alloc(64)
    hixl.free(other.addr)
    assert other.freed
    with hixl.alloc(64) as scoped:
        scoped.numpy()[:] = 1
    assert scoped.freed

    # Dropping every reference frees the block; the same sequence of allocs
    # and frees gives the same addresses on every rank.
    first = hixl.alloc(256).addr             # freed at once: the Buffer is gone
    again = hixl.alloc(256)
    assert again.addr == first
    assert hixl.allgather(again.addr) == [again.addr] * world.size
    hixl.barrier()


def test_transfers_keep_their_memory_alive(world):
    inbox = np.zeros(N)
    hixl.register_memory(inbox)
    inboxes = hixl.allgather(inbox.ctypes.data)
    before = hixl._hixl._stats()["pending_transfers"]
    # The source is a temporary: hixl holds it until the fence.
    hixl.put(world.next, np.full(N, world.rank + 0.5), inboxes[world.next])
    assert hixl._hixl._stats()["pending_transfers"] == before + 1
    gc.collect()
    hixl.fence()
    assert hixl._hixl._stats()["pending_transfers"] == 0
    hixl.barrier()
    assert (inbox == world.prev + 0.5).all()
    # A hixl.Buffer in flight counts as a view until the fence.
    block = hixl.alloc(64)
    hixl.put(world.rank, block, inboxes[world.rank], 64)
    assert block.views == 1
    with pytest.raises(hixl.InvalidArgumentError, match="fence"):
        block.free()
    hixl.fence()
    assert block.views == 0
    block.free()
    hixl.barrier()
    hixl.deregister_memory(inbox)
    assert hixl._hixl._stats()["registered_objects"] == 0
    hixl.barrier()


def test_register_twice_and_deregister(world):
    t = torch.zeros(100)
    hixl.register_memory(t)
    hixl.register_memory(t)                  # the same range again: a second reference
    addrs = hixl.allgather(t.data_ptr())
    hixl.barrier()
    hixl.deregister_memory(t)                # one reference left: still reachable
    hixl.barrier()
    hixl.put(world.next, torch.ones(100), addrs[world.next])
    hixl.barrier()
    assert t.sum() == 100
    hixl.deregister_memory(t.data_ptr())     # gone
    hixl.barrier()
    with pytest.raises(hixl.NotRegisteredError, match="^Remote memory not registered"):
        hixl.put(world.next, torch.ones(100), addrs[world.next])
    with pytest.raises(hixl.NotRegisteredError):
        hixl.get(world.prev, addrs[world.prev], torch.empty(100))
    hixl.barrier()


def test_calls_from_many_threads(world):
    inbox = torch.zeros(8, N)
    hixl.register_memory(inbox)
    inboxes = hixl.allgather(inbox.data_ptr())
    rows = [torch.full((N,), float(100 * world.rank + i)) for i in range(8)]
    errors = []

    def send(i):
        try:
            hixl.put(dst_rank=world.next, src_addr=rows[i], dst_addr=inboxes[world.next] + i * N * 4)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    hixl.fence()                             # completes the puts of every thread
    hixl.barrier()
    for i in range(8):
        assert (inbox[i] == 100 * world.prev + i).all()
    hixl.barrier()
    hixl.deregister_memory(inbox)
    hixl.barrier()


def test_barrier_releases_the_gil(world):
    """Rank 0 waits in barrier() on a thread while its main thread puts a
    flag into every other rank; those ranks join the barrier only once they
    see the flag.  With the GIL held in barrier() the put could not run and
    the other ranks would wait for the flag until the deadline."""
    if world.size < 2:
        pytest.skip("needs two ranks")
    flag = np.zeros(1, dtype=np.int64)
    hixl.register_memory(flag)
    flags = hixl.allgather(flag.ctypes.data)
    hixl.barrier()
    if world.rank == 0:
        entering = threading.Event()
        done = []

        def wait_in_barrier():
            entering.set()
            hixl.barrier()
            done.append(True)

        th = threading.Thread(target=wait_in_barrier)
        th.start()
        entering.wait()
        one = np.ones(1, dtype=np.int64)
        for r in range(1, world.size):
            hixl.put(r, one, flags[r])
        hixl.fence()
        th.join(timeout=120)
        assert done, "the barrier on the other thread did not finish"
    else:
        deadline = time.monotonic() + 60
        while flag[0] == 0:
            assert time.monotonic() < deadline, "rank 0's put never arrived: did barrier() hold the GIL?"
            os.sched_yield()
        hixl.barrier()
    hixl.barrier()
    hixl.deregister_memory(flag)
    hixl.barrier()
