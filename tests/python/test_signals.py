"""Signals, remote atomics and notifications from Python (issue 6), run by
every rank of a hixlrun world of 2 or more (ctest: 2 and 4 ranks, with
HIXL_NOTIFY_QUEUE_DEPTH=8 for the full-queue test).

Signal words and data live in symmetric memory (hixl.alloc) or in
registered torch tensors / numpy arrays, so both ways a signal reaches its
word are covered: shared memory, and the target's progress thread.
"""

import os
import threading
import time

import numpy as np
import pytest
import torch

import hixl

QUEUE_DEPTH = int(os.environ.get("HIXL_NOTIFY_QUEUE_DEPTH", "1024"))


@pytest.fixture(autouse=True)
def needs_peers(world):
    if world.size < 2:
        pytest.skip("needs 2 or more ranks")


def pattern(n, seed):
    """n bytes that differ from round to round (and from rank to rank)."""
    return ((np.arange(n, dtype=np.uint64) * 2654435761 + seed * 40503) >> 7).astype(np.uint8)


def test_constants_and_error_class(world):
    assert (hixl.SIGNAL_SET, hixl.SIGNAL_ADD) == (0, 1)
    assert [hixl.CMP_EQ, hixl.CMP_NE, hixl.CMP_GT, hixl.CMP_GE, hixl.CMP_LT, hixl.CMP_LE] == list(range(6))
    assert hixl.NOTIFY_MAX_BYTES == 4096
    assert hixl.errors.ERR_QUEUE_FULL == -13
    assert hixl.strerror(-13).startswith("HIXL_ERR_QUEUE_FULL")
    err = hixl.errors.error_for(-13, "full")
    assert type(err) is hixl.QueueFullError and isinstance(err, hixl.HixlError)
    assert err.name == "HIXL_ERR_QUEUE_FULL" and err.code == -13


def test_whoever_sees_the_signal_sees_the_data_numpy(world):
    """Rank 0 streams rounds of data into every other rank's symmetric block
    with put_signal, alternating SET and ADD (both leave the word at the
    round); a rank that sees round r's signal must see all of round r's data.
    Consumers acknowledge with atomic_set on rank 0 before it overwrites."""
    length, rounds = (1 << 20) + 13, 30
    data = hixl.alloc(length)
    words = hixl.alloc(8 * world.size)    # [0]: the signal; on rank 0, [r]: rank r's ack
    w = words.numpy(np.uint64)
    w[:] = 0
    hixl.barrier()
    if world.rank == 0:
        for r in range(1, rounds + 1):
            src = pattern(length, r)
            for to in range(1, world.size):
                if r % 2:
                    hixl.put_signal(dst_rank=to, src_addr=src, dst_addr=data, sig_addr=words, value=r,
                                    op=hixl.SIGNAL_SET)
                else:
                    hixl.put_signal(to, src, data, None, words.addr, 1, hixl.SIGNAL_ADD)
            for frm in range(1, world.size):
                hixl.wait_until(w[frm:frm + 1], hixl.CMP_GE, r, timeout_ms=30000)
    else:
        view = data.numpy()
        for r in range(1, rounds + 1):
            hixl.wait_until(words, hixl.CMP_GE, r, timeout_ms=30000)
            assert w[0] == r
            expected = pattern(length, r)
            bad = np.flatnonzero(view != expected)
            assert bad.size == 0, f"round {r}: signal seen before the data (first bad byte {bad[:1]})"
            hixl.atomic_set(0, words.addr + 8 * world.rank, r)
        del view
    hixl.fence()
    hixl.barrier()
    del w
    hixl.free(words)
    hixl.free(data)


def test_whoever_sees_the_signal_sees_the_data_torch_registered(world):
    """The same guarantee with registered (not symmetric) torch tensors:
    each rank puts rounds into a fresh slot of the next rank's tensor and
    ADDs one to its int64 signal word; the receiver waits on the tensor."""
    chunk, rounds = 64 << 10, 16                       # floats per round
    inbox = torch.zeros(rounds, chunk)
    sig = torch.zeros(1, dtype=torch.int64)
    hixl.register_memory(inbox)
    hixl.register_memory(sig)
    inboxes = hixl.allgather(inbox.data_ptr())
    sigs = hixl.allgather(sig.data_ptr())
    for r in range(rounds):
        src = torch.arange(chunk, dtype=torch.float32) + 1000.0 * (world.rank + 1) + r
        hixl.put_signal(dst_rank=world.next, src_addr=src, dst_addr=inboxes[world.next] + r * chunk * 4,
                        sig_addr=sigs[world.next], value=1, op=hixl.SIGNAL_ADD)
        hixl.wait_until(sig, hixl.CMP_GE, r + 1, timeout_ms=30000)
        expected = torch.arange(chunk, dtype=torch.float32) + 1000.0 * (world.prev + 1) + r
        assert torch.equal(inbox[r], expected), f"round {r}: signal seen before the data"
    hixl.fence()
    assert hixl._hixl._stats()["pending_transfers"] == 0    # the sources were kept until the fence
    hixl.barrier()
    assert sig.item() == rounds
    hixl.deregister_memory(sig)
    hixl.deregister_memory(inbox)


def test_wait_until_and_test_take_addresses_and_objects(world):
    buf = hixl.alloc(64)
    a = buf.numpy(np.uint64)
    a[:] = 0
    a[0] = 5
    arr = np.array([7], dtype=np.uint64)
    ten = torch.tensor([-1], dtype=torch.int64)           # -1 is 2**64 - 1 as a word
    for word, value in [(buf, 5), (buf.addr, 5), (a, 5), (a[1:2], 0), (arr, 7), (arr.ctypes.data, 7),
                        (ten, 2**64 - 1), (ten, -1), (memoryview(arr), 7)]:
        assert hixl.test(word, hixl.CMP_EQ, value), (word, value)
        hixl.wait_until(word, hixl.CMP_EQ, value, timeout_ms=1000)
    assert hixl.test(arr, hixl.CMP_GT, 6) and not hixl.test(arr, hixl.CMP_GT, 7)
    assert hixl.test(arr, hixl.CMP_GE, 7) and hixl.test(arr, hixl.CMP_LE, 7) and hixl.test(arr, hixl.CMP_LT, 8)
    assert hixl.test(arr, hixl.CMP_NE, 8) and not hixl.test(arr, hixl.CMP_NE, 7)
    assert hixl.test(arr, hixl.CMP_EQ, np.uint64(7))      # numpy integers are ints

    with pytest.raises(hixl.InvalidArgumentError, match="8 bytes"):
        hixl.test(np.zeros(1, dtype=np.uint32), hixl.CMP_EQ, 0)
    with pytest.raises(hixl.InvalidArgumentError, match="aligned"):
        hixl.test(buf.addr + 4, hixl.CMP_EQ, 0)
    with pytest.raises(hixl.InvalidArgumentError, match="aligned"):
        hixl.wait_until(buf.addr + 4, hixl.CMP_EQ, 0, timeout_ms=10)
    with pytest.raises(hixl.InvalidArgumentError, match="comparison"):
        hixl.wait_until(arr, 42, 0, timeout_ms=10)
    with pytest.raises(hixl.InvalidArgumentError, match="64-bit"):
        hixl.test(arr, hixl.CMP_EQ, 2**64)
    with pytest.raises(hixl.InvalidArgumentError, match="not float"):
        hixl.test(arr, hixl.CMP_EQ, 1.5)
    with pytest.raises(hixl.InvalidArgumentError, match="expected an int address"):
        hixl.test("word", hixl.CMP_EQ, 0)
    del a
    buf.free()
    hixl.barrier()


def test_atomics_return_the_old_value(world):
    buf = hixl.alloc(8)
    mine = buf.numpy(np.uint64)
    mine[0] = 0
    hixl.barrier()
    p = world.next
    hixl.atomic_set(p, buf, 10)
    assert hixl.atomic_fetch(p, buf.addr) == 10
    assert hixl.atomic_fetch_add(p, buf, 5) == 10
    assert hixl.atomic_add(p, buf, 1) is None
    assert hixl.atomic_swap(p, buf, 100) == 16
    assert hixl.atomic_compare_swap(p, buf, 99, 7) == 100     # no swap
    assert hixl.atomic_compare_swap(p, buf, expected=100, desired=7) == 100   # swap
    assert hixl.atomic_fetch(p, buf) == 7
    assert hixl.atomic_fetch_add(p, buf, -1) == 7              # negative values wrap: -1 subtracts one
    assert hixl.atomic_fetch_add(p, buf, -6) == 6
    assert hixl.atomic_fetch_add(p, buf, 0) == 0
    hixl.atomic_add(p, buf, -1)
    assert hixl.atomic_fetch(p, buf) == 2**64 - 1              # results are unsigned
    hixl.atomic_set(rank=p, addr=buf, value=7)
    hixl.barrier()
    assert int(mine[0]) == 7, "the word as the left neighbour left it"
    hixl.barrier()
    del mine
    buf.free()


@pytest.mark.parametrize("memory", ["symmetric", "registered"])
def test_contended_fetch_add_is_exact(world, memory):
    """Every rank adds to one word on rank 0 many times: the total is exact
    and the old values fetch_add returned are exactly 0 .. total-1."""
    adds = 1500 if memory == "symmetric" else 400
    if memory == "symmetric":
        buf = hixl.alloc(8)
        local = buf.numpy(np.uint64)
        local[0] = 0
        addr = hixl.allgather(buf.addr)[0]
    else:
        local = np.zeros(1, dtype=np.uint64)
        hixl.register_memory(local)
        addr = hixl.allgather(local.ctypes.data)[0]
    hixl.barrier()
    seen = [hixl.atomic_fetch_add(0, addr, 1) for _ in range(adds)]
    assert len(set(seen)) == adds
    hixl.barrier()
    total = world.size * adds
    assert hixl.atomic_fetch(0, addr) == total
    if world.rank == 0:
        assert int(local[0]) == total
    assert sum(hixl.allgather(sum(seen))) == total * (total - 1) // 2, "the old values are exactly 0..N-1"
    hixl.barrier()
    if memory == "symmetric":
        del local
        buf.free()
    else:
        hixl.deregister_memory(local)


def test_compare_swap_lock_protects_a_critical_section(world):
    """A lock made of compare-and-swap protects a read-modify-write done
    with plain get and put: no increment is lost."""
    iters = 60
    mem = hixl.alloc(16)                  # rank 0's: [0] the lock, [1] the counter
    m = mem.numpy(np.uint64)
    m[:] = 0
    hixl.barrier()
    lock, counter = mem.addr, mem.addr + 8
    me = world.rank + 1
    v = np.zeros(1, dtype=np.uint64)
    contended = 0
    for _ in range(iters):
        while hixl.atomic_compare_swap(0, lock, 0, me) != 0:
            contended += 1
            os.sched_yield()              # 2 cores, 4 ranks: let the holder run
        hixl.get(src_rank=0, src_addr=counter, dst_addr=v)
        hixl.fence()
        v += 1
        hixl.put(dst_rank=0, src_addr=v, dst_addr=counter)
        assert hixl.atomic_swap(0, lock, 0) == me, "someone else held the lock"   # ordered after the put
        hixl.fence()
    hixl.barrier()
    if world.rank == 0:
        assert int(m[1]) == world.size * iters and int(m[0]) == 0
    hixl.barrier()
    del m
    mem.free()


def test_timeouts(world):
    word = np.zeros(1, dtype=np.uint64)
    wall, cpu = time.monotonic(), time.thread_time()
    with pytest.raises(hixl.HixlTimeoutError) as e:
        hixl.wait_until(word, hixl.CMP_NE, 0, timeout_ms=300)
    wall, cpu = time.monotonic() - wall, time.thread_time() - cpu
    assert isinstance(e.value, TimeoutError) and e.value.code == hixl.errors.ERR_TIMEOUT
    assert "within 300 ms" in str(e.value)
    assert wall >= 0.29
    assert cpu < 0.5 * wall, f"waiting {wall:.2f} s used {cpu:.2f} s of CPU"
    t = time.monotonic()
    with pytest.raises(hixl.HixlTimeoutError, match="no notification"):
        hixl.wait_notification(timeout_ms=150)
    assert time.monotonic() - t >= 0.14
    with pytest.raises(TimeoutError):
        hixl.wait_notification(0)
    assert hixl.get_notifications() == []
    hixl.barrier()


def test_waits_release_the_gil(world):
    """Another thread of the same process ends the wait: it can run only
    because wait_until / wait_notification released the GIL."""
    buf = hixl.alloc(8)
    w = buf.numpy(np.uint64)
    w[0] = 0

    def later(f):
        time.sleep(0.1)
        f()

    th = threading.Thread(target=later, args=(lambda: hixl.atomic_set(world.rank, buf, 42),))
    th.start()
    t = time.monotonic()
    hixl.wait_until(buf, hixl.CMP_EQ, 42, timeout_ms=20000)
    assert time.monotonic() - t < 10
    th.join()
    th = threading.Thread(target=later, args=(lambda: hixl.notify(world.rank, b"from a thread"),))
    th.start()
    assert hixl.wait_notification(timeout_ms=20000) == (world.rank, b"from a thread")
    th.join()
    del w
    buf.free()
    hixl.barrier()


def test_notifications_arrive_after_the_puts_before_them(world):
    length, rounds = 256 << 10, 5
    inbox = np.zeros(length * world.size, dtype=np.uint8)
    hixl.register_memory(inbox)
    base = hixl.allgather(inbox.ctypes.data)[0]
    hixl.barrier()
    if world.rank != 0:
        for r in range(rounds):
            src = pattern(length, world.rank * 100 + r)
            hixl.put(0, src, base + world.rank * length)
            while True:                         # rank 0 drains as it goes; a full queue is retried
                try:
                    hixl.notify(0, str(r).encode())
                    break
                except hixl.QueueFullError:
                    time.sleep(0.001)
            assert hixl._hixl._stats()["pending_transfers"] == 0   # notify fenced first
            assert hixl.wait_notification(timeout_ms=30000) == (0, b"ok")   # rank 0 has checked round r
    else:
        for _ in range(rounds * (world.size - 1)):
            frm, data = hixl.wait_notification(timeout_ms=30000)
            r = int(data)
            got = inbox[frm * length:(frm + 1) * length]
            assert np.array_equal(got, pattern(length, frm * 100 + r)), \
                f"notification {r} from rank {frm} arrived before its data"
            hixl.notify(frm, b"ok")
    hixl.barrier()
    hixl.deregister_memory(inbox)


def test_notify_data_kinds_and_bad_arguments(world):
    me = world.rank
    kinds = [b"bytes", bytearray(b"bytearray"), memoryview(b"memoryview"), np.arange(3, dtype=np.uint16), b"",
             b"x" * hixl.NOTIFY_MAX_BYTES]
    for k in kinds[:4]:
        hixl.notify(me, k)
    got = hixl.get_notifications()
    assert got == [(me, b"bytes"), (me, b"bytearray"), (me, b"memoryview"),
                   (me, np.arange(3, dtype=np.uint16).tobytes())]
    for k in kinds[4:]:
        hixl.notify(dst_rank=me, data=k)
    assert hixl.wait_notification() == (me, b"")
    assert hixl.get_notifications() == [(me, b"x" * hixl.NOTIFY_MAX_BYTES)]
    with pytest.raises(hixl.InvalidArgumentError, match="HIXL_NOTIFY_MAX_BYTES"):
        hixl.notify(me, b"x" * (hixl.NOTIFY_MAX_BYTES + 1))
    with pytest.raises(hixl.InvalidRankError):
        hixl.notify(world.size, b"x")
    with pytest.raises(hixl.InvalidArgumentError, match="not str"):
        hixl.notify(me, "text")
    with pytest.raises(hixl.InvalidArgumentError, match="bytes-like"):
        hixl.notify(me, 12)
    assert hixl.get_notifications() == []
    hixl.barrier()


def test_full_queue_refuses_and_drops_nothing(world):
    assert QUEUE_DEPTH <= 64, "run with a small HIXL_NOTIFY_QUEUE_DEPTH (ctest sets 8)"
    if world.rank == 1:
        for i in range(QUEUE_DEPTH):
            hixl.notify(0, i.to_bytes(4, "little"))
        extra = QUEUE_DEPTH.to_bytes(4, "little")
        with pytest.raises(hixl.QueueFullError, match="full") as e:
            hixl.notify(0, extra)
        assert e.value.code == hixl.errors.ERR_QUEUE_FULL and e.value.name == "HIXL_ERR_QUEUE_FULL"
    hixl.barrier()
    if world.rank == 0:
        got = hixl.get_notifications()
        assert got == [(1, i.to_bytes(4, "little")) for i in range(QUEUE_DEPTH)], "in order, none dropped"
        assert hixl.get_notifications() == []
    hixl.barrier()
    if world.rank == 1:
        hixl.notify(0, extra)                   # the refused message, retried, now goes through
    if world.rank == 0:
        assert hixl.wait_notification(timeout_ms=30000) == (1, QUEUE_DEPTH.to_bytes(4, "little"))
        with pytest.raises(hixl.HixlTimeoutError):
            hixl.wait_notification(timeout_ms=20)
    hixl.barrier()


def test_wrong_addresses_fail_and_write_nothing(world):
    mem = np.full(64, 0x5A, dtype=np.uint8)
    hixl.register_memory(mem)
    bases = hixl.allgather(mem.ctypes.data)
    sym = hixl.alloc(64)
    sym.numpy()[:] = 0                           # a reused block is not cleared
    hixl.barrier()
    peer = world.next
    end = bases[peer] + 64                       # just past the peer's registered region
    data = np.arange(32, dtype=np.uint8)

    with pytest.raises(hixl.NotRegisteredError, match="not registered") as e:
        hixl.atomic_add(peer, end, 1)
    assert e.value.code == hixl.errors.ERR_NOT_REGISTERED
    for call in (lambda: hixl.atomic_fetch(peer, end), lambda: hixl.atomic_set(peer, end, 1),
                 lambda: hixl.atomic_fetch_add(peer, end, 1), lambda: hixl.atomic_swap(peer, end, 1),
                 lambda: hixl.atomic_compare_swap(peer, end, 0x5A5A5A5A5A5A5A5A, 1)):
        with pytest.raises(hixl.NotRegisteredError):
            call()
    with pytest.raises(hixl.InvalidArgumentError, match="aligned"):
        hixl.atomic_add(peer, bases[peer] + 4, 1)
    with pytest.raises(hixl.InvalidRankError):
        hixl.atomic_add(world.size, bases[peer], 1)
    # An unregistered signal word: the data must not be written either.
    with pytest.raises(hixl.NotRegisteredError):
        hixl.put_signal(dst_rank=peer, src_addr=data, dst_addr=bases[peer], sig_addr=end, value=1)
    with pytest.raises(hixl.NotRegisteredError):
        hixl.put_signal(peer, data, bases[peer], sig_addr=end, value=1, op=hixl.SIGNAL_ADD)
    with pytest.raises(hixl.InvalidArgumentError, match="op 7"):
        hixl.put_signal(peer, data, bases[peer], sig_addr=bases[peer] + 40, value=1, op=7)
    # What only Python checks: a local object's address means nothing on the peer,
    # a word is 8 bytes, sig_addr and value are required.
    with pytest.raises(hixl.InvalidArgumentError, match="symmetric"):
        hixl.put_signal(peer, data, bases[peer], sig_addr=np.zeros(1, dtype=np.uint64), value=1)
    with pytest.raises(hixl.InvalidArgumentError, match="symmetric"):
        hixl.atomic_add(peer, mem, 1)
    with pytest.raises(hixl.InvalidArgumentError, match="8 bytes"):
        hixl.atomic_add(peer, sym.numpy()[:4], 1)
    with pytest.raises(hixl.InvalidArgumentError, match="sig_addr"):
        hixl.put_signal(peer, data, bases[peer], value=1)
    with pytest.raises(hixl.InvalidArgumentError, match="value"):
        hixl.put_signal(peer, data, bases[peer], sig_addr=sym)
    with pytest.raises(hixl.InvalidArgumentError, match="larger"):
        hixl.put_signal(peer, np.zeros(100, dtype=np.uint8), sym, sig_addr=sym, value=1)
    hixl.fence()
    hixl.barrier()
    assert np.all(mem == 0x5A), "a refused operation wrote into this rank's memory"
    assert np.all(sym.numpy() == 0)
    hixl.barrier()
    sym.free()
    hixl.deregister_memory(mem)


def test_calls_need_a_world():
    """Run last: after finalize every call that needs the world says so
    (hixl.test, like hixl_test, needs none)."""
    import hixl as h

    if h.world_size() < 2:
        pytest.skip("needs 2 or more ranks")
    h.finalize()
    word = np.zeros(1, dtype=np.uint64)
    assert h.test(word, h.CMP_EQ, 0)
    for call in (lambda: h.wait_until(word, h.CMP_EQ, 0), lambda: h.atomic_fetch(0, 8),
                 lambda: h.put_signal(0, word, 8, sig_addr=8, value=1), lambda: h.notify(0, b"x"),
                 lambda: h.get_notifications(), lambda: h.wait_notification(1)):
        with pytest.raises(h.NotInitializedError, match="after hixl.finalize"):
            call()
