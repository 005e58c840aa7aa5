"""A bad local address never crashes Python: an int that is not memory this
process registered or allocated through hixl, nor memory it can read (or
write, where the call writes), raises a ValueError-like error naming the
address and the size (hixl.InvalidArgumentError; hixl.ParamInvalidError for
hixl.Engine).  Valid int addresses keep working, registered and allocated
memory without a system call (the known-region lookup).

Each case runs in a child process, so that a crash (SIGSEGV) is a failure of
that case rather than the end of pytest.  Runs without a launcher: the
children are worlds of one."""

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = r'''
import ctypes, mmap, socket, tempfile
import numpy as np
import hixl

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PAGE = mmap.PAGESIZE
RW = mmap.PROT_READ | mmap.PROT_WRITE
PROT_NONE = 0


def pages(n, prot=RW):
    """n fresh pages with protection prot (an int address)."""
    p = libc.mmap(None, n * PAGE, prot, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert p is not None and p != ctypes.c_void_p(-1).value, ctypes.get_errno()
    return p


def guarded(prot=RW):
    """One page with protection prot, followed by an inaccessible page."""
    p = pages(2, prot)
    assert libc.mprotect(p + PAGE, PAGE, PROT_NONE) == 0
    return p


def unmapped():
    """An address where nothing is mapped."""
    p = pages(1)
    assert libc.munmap(p, PAGE) == 0
    return p


_files = []


def beyond_eof():
    """A shared mapping of an empty file: mapped read-write, but any access
    faults (SIGBUS)."""
    f = tempfile.TemporaryFile()
    _files.append(f)
    p = libc.mmap(None, PAGE, RW, mmap.MAP_SHARED, f.fileno(), 0)
    assert p is not None and p != ctypes.c_void_p(-1).value, ctypes.get_errno()
    return p


def refused(fn, *words, cls=hixl.InvalidArgumentError):
    """fn() raises cls, a ValueError whose message holds every word."""
    try:
        fn()
    except cls as e:
        assert isinstance(e, ValueError), type(e)
        msg = str(e)
        for w in words:
            assert w in msg, (w, msg)
        print("refused:", msg)
        return
    raise AssertionError("not refused: %r" % (fn,))


def slow_checks():
    return hixl._hixl._stats()["address_slow_checks"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
'''


def run_child(code):
    env = dict(os.environ, HIXL_LOG_LEVEL="error")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "HIXL_LAUNCHER"):
        env.pop(var, None)
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code) + "\nprint('CHILD OK')\n"], env=env,
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode >= 0, f"the child died of signal {-r.returncode}:\n{out}"
    assert r.returncode == 0 and "CHILD OK" in r.stdout, out
    return r.stdout


def test_test_on_a_bad_word():
    """hixl.test needs no world; it reads the word."""
    out = run_child("""
        refused(lambda: hixl.test(8, hixl.CMP_EQ, 0), "hixl.test", "0x8", "8 bytes", "read")
        refused(lambda: hixl.test(0, hixl.CMP_EQ, 0), "0x0")
        refused(lambda: hixl.test(unmapped(), hixl.CMP_EQ, 0), "read")
        refused(lambda: hixl.test(pages(1, PROT_NONE), hixl.CMP_EQ, 0), "read")
        refused(lambda: hixl.test(beyond_eof(), hixl.CMP_EQ, 0), "read")
        g = guarded()
        refused(lambda: hixl.test(g + PAGE - 4, hixl.CMP_EQ, 0), hex(g + PAGE - 4), "8 bytes")  # straddles
        refused(lambda: hixl.test(2**64 - 4, hixl.CMP_EQ, 0), "0xfffffffffffffffc")             # wraps around
        # Valid words still work: private memory, read-only memory, the last word before the guard page.
        a = np.array([7], dtype=np.uint64)
        assert hixl.test(a.ctypes.data, hixl.CMP_EQ, 7)
        assert hixl.test(pages(1, mmap.PROT_READ), hixl.CMP_EQ, 0)
        ctypes.c_uint64.from_address(g + PAGE - 8).value = 5
        assert hixl.test(g + PAGE - 8, hixl.CMP_EQ, 5)
    """)
    assert out.count("refused:") == 7


def test_wait_until_on_a_bad_word():
    run_child("""
        hixl.init()
        refused(lambda: hixl.wait_until(8, hixl.CMP_EQ, 1, timeout_ms=0), "hixl.wait_until", "0x8", "read")
        refused(lambda: hixl.wait_until(unmapped(), hixl.CMP_EQ, 1, timeout_ms=0), "read")
        a = np.array([3], dtype=np.uint64)
        hixl.wait_until(a.ctypes.data, hixl.CMP_EQ, 3, timeout_ms=0)
        hixl.finalize()
    """)


def test_put_from_a_bad_source():
    run_child("""
        hixl.init()
        dst = hixl.alloc(2 * PAGE)
        refused(lambda: hixl.put(0, 8, dst, 8), "hixl.put", "src_addr", "0x8", "8 bytes", "read")
        refused(lambda: hixl.put(0, unmapped(), dst, 64), "64 bytes", "read")
        g = guarded()
        refused(lambda: hixl.put(0, g, dst, PAGE + 8), hex(g), str(PAGE + 8) + " bytes")  # runs into the guard page
        refused(lambda: hixl.put_signal(0, 8, dst, 8, sig_addr=dst.addr + PAGE, value=1), "hixl.put_signal", "0x8")
        # Readable ints work: a read-only page, the page before the guard, a numpy array's address.
        ro = pages(1, mmap.PROT_READ)
        hixl.put(0, ro, dst, PAGE)
        ctypes.memset(g, 0x5A, PAGE)
        hixl.put(0, g, dst.addr + PAGE, PAGE)
        hixl.fence()
        view = dst.numpy(np.uint8)
        assert (view[:PAGE] == 0).all() and (view[PAGE:] == 0x5A).all()
        src = np.arange(8, dtype=np.uint64)
        hixl.put_signal(0, src.ctypes.data, dst, 64, sig_addr=dst.addr + PAGE, value=9)
        hixl.fence()
        assert (dst.numpy(np.uint64)[:8] == src).all()
        del view
        hixl.finalize()
    """)


def test_get_into_a_bad_destination():
    run_child("""
        hixl.init()
        src = hixl.alloc(2 * PAGE)
        src.numpy(np.uint8)[:] = 0x33
        refused(lambda: hixl.get(0, src, 8, 8), "hixl.get", "dst_addr", "0x8", "8 bytes", "write")
        refused(lambda: hixl.get(0, src, unmapped(), 64), "write")
        ro = pages(1, mmap.PROT_READ)
        refused(lambda: hixl.get(0, src, ro, 64), hex(ro), "64 bytes", "write")            # read-only
        e = beyond_eof()
        refused(lambda: hixl.get(0, src, e, 64), hex(e), "write")                           # SIGBUS on a write
        refused(lambda: hixl.put(0, e, src, 64), hex(e), "read")                            # and on a read
        g = guarded()
        refused(lambda: hixl.get(0, src, g, PAGE + 1), hex(g), "write")                     # into the guard page
        hixl.get(0, src, g, PAGE)
        a = np.zeros(16, dtype=np.uint8)
        hixl.get(0, src, a.ctypes.data, 16)
        hixl.fence()
        assert ctypes.string_at(g, PAGE) == b"\\x33" * PAGE and (a == 0x33).all()
        hixl.finalize()
    """)


def test_register_memory_at_a_bad_address():
    run_child("""
        hixl.init()
        refused(lambda: hixl.register_memory(8, 8), "hixl.register_memory", "0x8", "8 bytes")
        refused(lambda: hixl.register_memory(unmapped(), PAGE), "register_memory")
        g = guarded()
        refused(lambda: hixl.register_memory(g, 2 * PAGE), hex(g))
        hixl.register_memory(g, PAGE)
        hixl.deregister_memory(g)
        hixl.finalize()
    """)


def test_known_regions_need_no_system_call_and_are_forgotten():
    """Registered and allocated memory is found in the binding's own table;
    after deregistration (or finalize) the address is checked again."""
    run_child("""
        hixl.init()
        p = pages(4)
        hixl.register_memory(p, 4 * PAGE)
        buf = hixl.alloc(4 * PAGE)
        a = np.zeros(8, dtype=np.uint64)
        hixl.register_memory(a)
        before = slow_checks()
        for i in range(100):
            assert hixl.test(p + 8 * i, hixl.CMP_EQ, 0)
        hixl.put(0, p + PAGE, buf.addr, 2 * PAGE)
        hixl.get(0, buf.addr + PAGE, p + 2 * PAGE, PAGE)
        hixl.put(0, buf.addr + 16, p, 64)
        hixl.put(0, a.ctypes.data + 8, buf, 56)
        hixl.wait_until(a.ctypes.data, hixl.CMP_EQ, 0, timeout_ms=0)
        hixl.fence()
        assert slow_checks() == before, (slow_checks(), before)
        # Forgotten on deregistration: the page can go, and the int is refused.
        hixl.deregister_memory(p)
        assert libc.munmap(p, 4 * PAGE) == 0
        refused(lambda: hixl.test(p, hixl.CMP_EQ, 0), hex(p), "read")
        refused(lambda: hixl.get(0, buf, p, 64), hex(p), "write")
        assert slow_checks() > before
        hixl.deregister_memory(a)
        hixl.finalize()
        assert hixl._hixl._stats()["known_ranges"] == 0  # the block went with finalize
    """)


def test_engine_local_addresses():
    out = run_child("""
        server, client = hixl.Engine(), hixl.Engine()
        for attempt in range(5):
            name = "127.0.0.1:%d" % free_port()
            try:
                server.initialize(name, {"transport": "shm"})
                break
            except hixl.EngineError:
                if attempt == 4:
                    raise
        client.initialize("127.0.0.1", {"transport": "shm"})
        client.connect(name, timeout_ms=10000)
        remote = np.zeros(4096, dtype=np.uint8)
        server.register_mem(remote)
        r = remote.ctypes.data
        bad = dict(cls=hixl.ParamInvalidError)
        refused(lambda: client.transfer_sync(name, hixl.WRITE, [(8, r, 8)]), "block 0", "0x8", "8 bytes", "read", **bad)
        refused(lambda: client.transfer_sync(name, hixl.READ, [(8, r, 8)]), "0x8", "write", **bad)
        refused(lambda: client.transfer_async(name, hixl.WRITE, [hixl.TransferOpDesc(8, r, 8)]), "0x8", **bad)
        ro = pages(1, mmap.PROT_READ)
        refused(lambda: client.transfer_sync(name, "read", [(ro, r, 64)]), hex(ro), "64 bytes", "write", **bad)
        refused(lambda: client.register_mem(8, 8), "register_mem", "0x8", **bad)
        # Valid ints work; the local side is found in the engine's registrations without a system call.
        local = pages(1)
        h = client.register_mem(local, PAGE)
        ctypes.memset(local, 0x44, 64)
        before = slow_checks()
        client.transfer_sync(name, hixl.WRITE, [(local, r, 64), hixl.TransferOpDesc(local + 64, r + 64, 64)])
        assert slow_checks() == before
        assert (remote[:64] == 0x44).all() and (remote[64:128] == 0).all()
        client.deregister_mem(h)
        client.transfer_sync(name, hixl.READ, [(local, r + 64, 64)])
        assert slow_checks() > before
        assert ctypes.string_at(local, 64) == bytes(64)
        client.finalize()
        server.finalize()
        assert hixl._hixl._stats()["known_ranges"] == 0  # the server's registration went with finalize
    """)
    assert out.count("refused:") == 5
