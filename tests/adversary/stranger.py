"""A stranger on the host: finds a hixl job's listeners the way an attacker
would (/proc/PID/environ, /proc/PID/fd, /proc/net/tcp, /proc/net/unix) and
talks to them with no secret, a wrong secret or the right one (the last to
show that this client speaks the handshake of src/base/auth.h correctly,
so that its refusals mean something).  Every socket call is bounded.

As a program (for another uid, under setpriv): stranger.py unix NAME prints
what the listener did: "closed", or "greeting mode M"."""

import hashlib
import hmac
import os
import socket
import sys

MAGIC = b"HXA1"
KINDS = {"store": 1, "control": 2, "shm": 3}
GREETING = 40
TIMEOUT_S = 10


def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
    return {k.decode(): v.decode() for k, v in pairs}


def socket_inodes(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    return inodes


def tcp_listen_ports(pid):
    inodes, ports = socket_inodes(pid), set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def unix_listen_names(pid):
    inodes, names = socket_inodes(pid), []
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[6] in inodes and fields[5] == "01" and fields[7].startswith("@hixl-"):
                names.append(fields[7][1:])
    return names


def connect_tcp(port):
    return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)


def connect_unix(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT_S)
    s.connect("\0" + name)
    return s


def recv_until_eof(s, limit=1 << 16):
    """Everything the peer sends until it closes (bounded by the timeout)."""
    got = b""
    while len(got) < limit:
        try:
            chunk = s.recv(limit - len(got))
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    return got


def recv_exact(s, n):
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def greeting(s, kind):
    g = recv_exact(s, GREETING)
    assert len(g) == GREETING and g[:4] == MAGIC, f"no hixl greeting: {g!r}"
    assert g[4] == KINDS[kind], f"a listener of kind {g[4]}, not {kind}"
    return g


def mac(secret, label, kind, a, b):
    return hmac.new(secret, label + bytes([KINDS[kind]]) + a + b, hashlib.sha256).digest()


def no_secret(s, kind, junk):
    """Sends what a client without the secret would (a request at once).
    Returns what came back after the greeting: b"" means refused, unanswered."""
    g = greeting(s, kind)
    assert g[5] == 1, "the listener does not ask for a secret"
    s.sendall(junk)
    return recv_until_eof(s)


def with_secret(s, kind, secret):
    """The client half with `secret`; returns what came back after the
    greeting and whether it is the server's valid proof."""
    g = greeting(s, kind)
    nonce_s, nonce_c = g[8:40], os.urandom(32)
    s.sendall(nonce_c + mac(secret, b"hixl-c", kind, nonce_s, nonce_c))
    got = recv_exact(s, 32)
    return got, got == mac(secret, b"hixl-s", kind, nonce_c, nonce_s)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "unix":
        try:
            conn = connect_unix(sys.argv[2])
            g = recv_until_eof(conn, GREETING)
        except OSError as e:
            print(f"error {e}")
            sys.exit(0)
        print("closed" if not g else f"greeting mode {g[5] if len(g) > 5 else '?'}")
        sys.exit(0)
    sys.exit(f"usage: {sys.argv[0]} unix NAME")
