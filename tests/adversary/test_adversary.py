"""Strangers against live hixl jobs (issue 13): with a job secret, a
connection to the store, a rank's control port or its shm socket that
cannot prove the secret is closed unanswered while the ranks' put/get still
verify; without a secret, a process of another user is refused by the shm
socket; an engine refuses another engine of a different secret.  Every wait
is bounded; every process started here is stopped."""

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

import stranger

HERE = os.path.dirname(os.path.abspath(__file__))
HIXLRUN = os.environ.get("HIXLRUN", "hixlrun")
WRONG = bytes(range(32))


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIXL_SECRET")}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(HIXL_TRANSPORT="shm", HIXL_TIMEOUT_MS="60000", **extra)
    return env


class Job:
    """A process whose output is read line by line on a thread."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines, self.out = queue.Queue(), []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, prefix, timeout_s=90):
        while True:
            line = self.lines.get(timeout=timeout_s)
            assert line is not None, "the job ended early:\n" + "".join(self.out)
            if line.startswith(prefix):
                return line

    def finish(self, timeout_s=90):
        rc = self.proc.wait(timeout=timeout_s)
        self.lines.get(timeout=10)  # the pump saw the end
        return rc, "".join(self.out)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)


def start_job(tmp_path, ranks, env, script="rank.py"):
    """A job of `ranks` ranks running `script` (a rank that prints READY and
    waits on the fifo it is given): the Job, the fifo, every rank's pid."""
    go = tmp_path / "go"
    os.mkfifo(go)
    rank_py = os.path.join(HERE, script)
    if ranks > 1:
        argv = [HIXLRUN, "-n", str(ranks), "--timeout", "150", sys.executable, rank_py, str(go)]
    else:
        argv = ["timeout", "150", sys.executable, rank_py, str(go)]
    job = Job(argv, env)
    pids = [int(p) for p in job.wait_for("READY").split()[1:]]
    return job, go, pids


def expect_verified(rc, out, ranks):
    """The job exited 0 and each of its ranks verified its put and get."""
    assert rc == 0, out
    assert out.count("put/get verified") == ranks, out


def release(go):
    with open(go, "w") as f:  # rank 0 has it open for reading: never blocks long
        f.write("go\n")


def test_strangers_cannot_reach_a_job_with_a_secret(tmp_path):
    job, go, pids = start_job(tmp_path, 2, clean_env())
    try:
        env0 = stranger.environ(pids[0])
        secret = bytes.fromhex(env0["HIXL_SECRET"])  # hixlrun made one
        assert stranger.environ(pids[1])["HIXL_SECRET"] == env0["HIXL_SECRET"]
        store_port = int(env0["MASTER_PORT"])
        targets = [("store", lambda: stranger.connect_tcp(store_port))]
        for pid in pids:
            control = [p for p in stranger.tcp_listen_ports(pid) if p != store_port]
            shm = stranger.unix_listen_names(pid)
            assert len(control) == 1 and len(shm) == 1, (pid, control, shm)
            targets.append(("control", lambda port=control[0]: stranger.connect_tcp(port)))
            targets.append(("shm", lambda name=shm[0]: stranger.connect_unix(name)))
        # A store HELLO for rank 1, a control request, anything: no reply.
        junk = (5).to_bytes(4, "little") + b"\x00\x01\x00\x00\x00" + bytes(100)
        for kind, connect in targets:
            with connect() as s:
                assert stranger.no_secret(s, kind, junk) == b"", f"the {kind} listener answered a stranger"
            with connect() as s:
                got, valid = stranger.with_secret(s, kind, WRONG)
                assert got == b"" and not valid, f"the {kind} listener accepted a wrong secret"
            with connect() as s:  # the stranger's client is right: with the secret it is let in
                got, valid = stranger.with_secret(s, kind, secret)
                assert valid, f"the {kind} listener refused the right secret"
        release(go)
        rc, out = job.finish()
    finally:
        job.stop()
    expect_verified(rc, out, 2)
    for listener in ("hixl store", "hixl control listener", "hixl shm socket"):
        assert f"{listener}" in out and "refused" in out, out
    assert "wrong proof of the job secret" in out, out
    assert "this job has no secret" not in out, out


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_another_user_cannot_reach_the_shm_socket_without_a_secret(tmp_path):
    job, go, pids = start_job(tmp_path, 1, clean_env())  # no launcher, no secret
    try:
        (name,) = stranger.unix_listen_names(pids[0])
        probe = [sys.executable, os.path.join(HERE, "stranger.py"), "unix", name]
        other = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + probe,
                               capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "closed", other
        same = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert same.stdout.strip() == "greeting mode 0", same  # the same user is admitted
        release(go)
        rc, out = job.finish()
    finally:
        job.stop()
    expect_verified(rc, out, 1)
    assert "hixl shm socket" in out and "not this process's uid" in out, out
    assert out.count("this job has no secret") == 1, out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_engines_admit_only_their_secret(monkeypatch):
    import hixl

    for var in ("HIXL_SECRET", "HIXL_SECRET_FILE"):
        monkeypatch.delenv(var, raising=False)
    s, t = "11" * 32, "22" * 32
    opts = {"transport": "shm", "timeout_ms": 20000}
    server = hixl.Engine()
    name = f"127.0.0.1:{free_port()}"
    server.initialize(name, dict(opts, secret=s))
    remote = np.zeros(1024, dtype=np.int64)
    server.register_mem(remote)
    try:
        for secret, part in ((t, "refused this process's proof"), (None, "requires the job secret")):
            other = hixl.Engine()
            other.initialize("127.0.0.1", dict(opts, secret=secret) if secret else opts)
            with pytest.raises(hixl.EngineError, match=part):
                other.connect(name, timeout_ms=10000)
            other.finalize()
        good = hixl.Engine()
        good.initialize("127.0.0.1", dict(opts, secret=s))
        good.connect(name, timeout_ms=10000)
        src = np.arange(1024, dtype=np.int64)
        good.transfer_sync(name, hixl.WRITE, [(src, remote.ctypes.data)], timeout_ms=20000)
        assert np.array_equal(remote, src)
        good.finalize()
        with pytest.raises(hixl.EngineError, match="job secret must be 64 hex digits"):
            hixl.Engine().initialize("127.0.0.1", dict(opts, secret="abc"))
    finally:
        server.finalize()
