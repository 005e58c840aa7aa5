"""Strangers that stall instead of lying (issue 13, "no client can stall a
server"): clients that send 2 bytes of a frame and stop, hundreds of idle
connections, and half-open connections, against a live 2-rank job with a
job secret (the strangers read it from /proc, as the job's own user could).
The job's notify round trip keeps its latency, each listener holds at most
its cap of connections, and a half-open connection is closed after its
timeout.  Every wait is bounded; every process and socket is closed."""

import os
import time

import stranger
from test_adversary import clean_env, expect_verified, release, start_job

CAP = 256  # base/frame_server.h: connections per listener


def targets(pids):
    """(kind, port, pid) of every TCP listener of the job, and its secret."""
    env0 = stranger.environ(pids[0])
    secret = bytes.fromhex(env0["HIXL_SECRET"])
    store = int(env0["MASTER_PORT"])
    out = [("store", store, pids[0])]
    for pid in pids:
        out += [("control", p, pid) for p in stranger.tcp_listen_ports(pid) if p != store]
    return out, secret


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def slow_client(kind, port, secret):
    """Past the handshake, then 2 bytes of a frame's header, then nothing."""
    s = stranger.connect_tcp(port)
    _, valid = stranger.with_secret(s, kind, secret)
    assert valid, f"the {kind} listener refused the right secret"
    s.sendall(b"\x40\x00")
    return s


def test_slow_and_idle_strangers_stall_no_one(tmp_path):
    job, go, pids = start_job(tmp_path, 2, clean_env(), "rank_loop.py")
    held = []
    try:
        listeners, secret = targets(pids)
        assert len(listeners) == 3, listeners
        fds0 = {pid: fds(pid) for pid in pids}
        rss0 = {pid: rss_kib(pid) for pid in pids}
        # 300 idle connections to each listener (past its cap), then 4 slow
        # ones each, the newest, so that the cap does not close them first.
        for _, port, _ in listeners:
            for _ in range(300):
                held.append(stranger.connect_tcp(port))
        for kind, port, _ in listeners:
            for _ in range(4):
                held.append(slow_client(kind, port, secret))
        release(go)
        line = job.wait_for("ROUNDTRIP")
        # While the strangers are still connected: each listener holds at
        # most its cap, and the memory did not grow with them.
        for pid in pids:
            n_listeners = sum(1 for _, _, p in listeners if p == pid)
            assert fds(pid) <= fds0[pid] + n_listeners * CAP + 32, (pid, fds0[pid], fds(pid))
            assert rss_kib(pid) - rss0[pid] < 64 * 1024, (pid, rss0[pid], rss_kib(pid))
        with open(go, "w") as f:
            f.write("done\n")
        rc, out = job.finish()
    finally:
        for s in held:
            s.close()
        job.stop()
    expect_verified(rc, out, 2)
    before, during = float(line.split()[2]), float(line.split()[4])
    print(f"slowest notify round trip: {before * 1000:.1f} ms before the attack, {during * 1000:.1f} ms during it")
    # The old control server waited up to 5 s on each partial frame, in turn.
    assert during < 1.0, f"the notify round trip took {during:.3f} s during the attack ({before:.3f} s before)"
    assert "has its 256 connections already" in out or "never identified itself" in out, out


def test_a_half_open_connection_is_closed_after_its_timeout(tmp_path):
    job, go, pids = start_job(tmp_path, 2, clean_env(HIXL_HALF_OPEN_TIMEOUT_MS="1500"), "rank_loop.py")
    try:
        listeners, secret = targets(pids)
        for kind, port, _ in listeners:
            half = slow_client(kind, port, secret)
            mute = stranger.connect_tcp(port)  # never answers the greeting
            t0 = time.monotonic()
            assert stranger.recv_until_eof(half) == b"", f"the {kind} listener answered half a frame"
            took = time.monotonic() - t0
            assert 0.5 < took < 9, f"the {kind} listener closed a half-open connection after {took:.2f} s"
            assert len(stranger.recv_until_eof(mute)) == stranger.GREETING, kind  # the greeting, then closed
            half.close()
            mute.close()
        release(go)
        job.wait_for("ROUNDTRIP")
        with open(go, "w") as f:
            f.write("done\n")
        rc, out = job.finish()
    finally:
        job.stop()
    expect_verified(rc, out, 2)
    assert "sent part of a frame and nothing more for 1500 ms" in out, out
    assert "did not complete the authentication handshake in time" in out, out
