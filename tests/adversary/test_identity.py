"""A member of the job (it holds the secret) against a live 2-rank job
(issue 13): on its own connections to rank 0's control port it claims rank
1's identity while rank 1 is connected, names ranks that do not exist, and
switches identity on one connection; each is refused, and the ranks' put and
get still verify.  Every socket call is bounded; the job is always stopped."""

import struct

import stranger
from test_adversary import clean_env, expect_verified, release, start_job

NOTIFY = 3  # core::ControlMsg::kNotify


def request(s, msg_type, sender, payload=b""):
    """Sends one control request frame: [u32 len][u8 type][i64 from][payload]."""
    body = struct.pack("<Bq", msg_type, sender) + payload
    s.sendall(struct.pack("<I", len(body)) + body)


def reply(s):
    """(code, text) of the reply, or None when the server closed the connection."""
    head = stranger.recv_exact(s, 4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    body = stranger.recv_exact(s, n)
    if len(body) < n or n < 4:
        return None
    (code,) = struct.unpack("<i", body[:4])
    return code, body[4:].decode(errors="replace")


def member(port, secret):
    s = stranger.connect_tcp(port)
    _, valid = stranger.with_secret(s, "control", secret)
    assert valid, "the member's handshake failed: its refusals would mean nothing"
    return s


def test_a_member_cannot_take_another_ranks_identity(tmp_path):
    job, go, pids = start_job(tmp_path, 2, clean_env())
    try:
        env0 = stranger.environ(pids[0])
        secret = bytes.fromhex(env0["HIXL_SECRET"])
        store_port = int(env0["MASTER_PORT"])
        (port0,) = [p for p in stranger.tcp_listen_ports(pids[0]) if p != store_port]
        # Rank 1 holds a live connection to rank 0 (the job's first put):
        # claiming its id on another connection is refused unanswered.
        with member(port0, secret) as s:
            request(s, NOTIFY, 1, b"forged")
            assert reply(s) is None, "rank 0 answered a second connection claiming rank 1"
        # Ranks that do not exist, and rank 0 itself: answered with an error.
        for sender in (2, 1 << 40, -5, 0):
            with member(port0, secret) as s:
                request(s, NOTIFY, sender, b"forged")
                got = reply(s)
                assert got is not None and got[0] != 0, f"rank 0 took a notification from rank {sender}: {got}"
        # One connection is one identity: after its first request (as rank
        # 7, refused), it cannot speak as rank 1.
        with member(port0, secret) as s:
            request(s, NOTIFY, 7, b"forged")
            got = reply(s)
            assert got is not None and got[0] != 0, got
            request(s, NOTIFY, 1, b"forged")
            assert reply(s) is None, "a connection switched identity"
        release(go)
        rc, out = job.finish()
    finally:
        job.stop()
    expect_verified(rc, out, 2)
