"""Strangers against the shm transport's Unix socket, now served on the
process's event loop (issue 13): half frames, hundreds of connections,
garbage with and without the job secret, while the job's relayed
put+fence between its two ranks (HIXL_SHM_CMA=0) keeps completing.  Its
latency is asserted and printed; each socket holds at most its cap of
connections.  Every wait is bounded; every process and socket is closed."""

import os
import re
import threading
import time

import stranger
from test_adversary import clean_env, expect_verified, release, start_job

CAP = 256  # base/frame_server.h: connections per listener
MSG = 24  # transport/shm/fd_channel.h: the size of a request


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def connect(name):
    """A connection to the socket; while its accept queue is full (a Unix
    socket refuses with EAGAIN rather than waiting), tries again for up to
    10 s."""
    end = time.monotonic() + 10
    while True:
        try:
            return stranger.connect_unix(name)
        except BlockingIOError:
            if time.monotonic() > end:
                raise
            time.sleep(0.002)


def authenticated(name, secret):
    s = connect(name)
    _, valid = stranger.with_secret(s, "shm", secret)
    assert valid, "the shm socket refused the right secret"
    return s


def garbage(names, secret, stop):
    """Until stop: connections that send junk before the handshake, and
    authenticated ones that send requests of unknown types and half ones."""
    i = 0
    while not stop.is_set():
        name = names[i % len(names)]
        i += 1
        try:
            with connect(name) as s:
                s.sendall(os.urandom(100))
            with authenticated(name, secret) as s:
                s.sendall(os.urandom(MSG - 1) + b"\x63" + os.urandom(MSG + 5))
        except OSError:
            pass  # the server may drop it first: that is its right


def test_strangers_on_the_shm_socket_stall_no_relayed_put(tmp_path):
    job, go, pids = start_job(tmp_path, 2, clean_env(HIXL_SHM_CMA="0", HIXL_SHM_PROMOTE="0"), "rank_shm.py")
    held, stop, thread = [], threading.Event(), None
    try:
        assert len(pids) == 2, pids
        secret = bytes.fromhex(stranger.environ(pids[0])["HIXL_SECRET"])
        names = [n for pid in pids for n in stranger.unix_listen_names(pid)]
        assert len(names) == 2, names
        fds0 = {pid: fds(pid) for pid in pids}
        # 300 idle connections to each socket (past its cap), then, the
        # newest, 4 that authenticate and send half a request each.
        for name in names:
            for _ in range(300):
                held.append(connect(name))
        for name in names:
            for _ in range(4):
                s = authenticated(name, secret)
                s.sendall(b"\x01\x00\x00\x00" + bytes(MSG // 2 - 4))
                held.append(s)
        thread = threading.Thread(target=garbage, args=(names, secret, stop), daemon=True)
        thread.start()
        release(go)
        line = job.wait_for("RELAYED")
        for pid in pids:  # while the strangers are still there
            assert fds(pid) <= fds0[pid] + CAP + 32, (pid, fds0[pid], fds(pid))
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the garbage thread did not stop"
        with open(go, "w") as f:
            f.write("done\n")
        rc, out = job.finish()
    finally:
        stop.set()
        for s in held:
            s.close()
        job.stop()
    expect_verified(rc, out, 2)
    # (a log line of another thread may follow on the same line)
    m = re.match(r"RELAYED before (\d+\.\d{4}) during (\d+\.\d{4})", line)
    assert m, line
    before, during = float(m.group(1)), float(m.group(2))
    print(f"slowest relayed put+fence: {before * 1000:.1f} ms before the attack, {during * 1000:.1f} ms during it")
    assert during < 1.0, f"a relayed put+fence took {during:.3f} s during the attack ({before:.3f} s before)"
    assert "hixl shm socket" in out, out
    assert "has its 256 connections already" in out or "never identified itself" in out, out
