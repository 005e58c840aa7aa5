"""hixl.Engine from Python: engines in this process and in child processes,
tensors and arrays as local memory, the exception classes, and the KV
transfer example end to end.  Runs without a launcher; every wait is bounded."""

import os
import signal
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import hixl

TRANSPORTS = ["shm"] + (["ucx"] if os.environ.get("HIXL_TEST_UCX") == "1" else [])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=TRANSPORTS)
def pair(request):
    """A listening engine (server) and a client connected to it."""
    opts = {"transport": request.param, "timeout_ms": 20000}
    server, client = hixl.Engine(), hixl.Engine()
    for attempt in range(5):
        name = f"127.0.0.1:{free_port()}"
        try:
            server.initialize(name, opts)
            break
        except hixl.EngineError:
            if attempt == 4:
                raise
    client.initialize("127.0.0.1", opts)
    client.connect(name, timeout_ms=10000)
    yield server, client, name
    client.finalize()
    server.finalize()


def test_write_read_tensors_and_arrays(pair):
    server, client, name = pair
    remote = torch.zeros(1 << 20, dtype=torch.float32)
    server.register_mem(remote)
    src = torch.arange(1 << 20, dtype=torch.float32)
    # A batch of non-contiguous blocks: every other 4 KiB page, from tensor views.
    pages = [(src[i * 1024:(i + 1) * 1024], remote.data_ptr() + i * 4096) for i in range(0, 1024, 2)]
    client.transfer_sync(name, hixl.WRITE, pages, timeout_ms=20000)
    view = remote.view(1024, 1024)
    assert torch.equal(view[0::2], src.view(1024, 1024)[0::2])
    assert int(view[1::2].count_nonzero()) == 0
    back = np.zeros(1 << 20, dtype=np.float32)
    client.transfer_sync(name, "read", [(back, remote.data_ptr())], timeout_ms=20000)
    assert np.array_equal(back, remote.numpy())
    # TransferOpDesc with int addresses, and an async transfer.
    dst = torch.empty(1024, dtype=torch.float32)
    req = client.transfer_async(name, hixl.READ, [hixl.TransferOpDesc(dst.data_ptr(), remote.data_ptr(), 4096)])
    status = hixl.TransferStatus.WAITING
    for _ in range(1_000_000):
        status = client.get_transfer_status(req)
        if status != hixl.TransferStatus.WAITING:
            break
    assert status == hixl.TransferStatus.COMPLETED, req.error
    assert req.done and req.error == ""
    assert torch.equal(dst, src[:1024])


def test_notifications_and_their_order(pair):
    server, client, name = pair
    remote = torch.zeros(4096, dtype=torch.int64)
    server.register_mem(remote)
    for i in range(5):
        client.transfer_sync(name, hixl.WRITE, [(torch.full((4096,), i, dtype=torch.int64), remote.data_ptr())])
        client.send_notify(name, "step", str(i))
        (n,) = server.wait_notifies(10000)
        assert (n.name, n.notify_msg) == ("step", str(i))
        assert int(remote[0]) == i and int(remote[-1]) == i  # the data came first
    client.send_notify(name, "bin", b"\x00\xffraw")
    assert server.wait_notifies(10000)[0].data == b"\x00\xffraw"
    assert server.get_notifies() == []
    with pytest.raises(hixl.EngineTimeoutError):
        server.wait_notifies(20)


def test_errors_are_exceptions(pair):
    server, client, name = pair
    remote = torch.zeros(1024, dtype=torch.uint8)
    handle = server.register_mem(remote)
    src = torch.ones(2048, dtype=torch.uint8)
    with pytest.raises(hixl.RemoteNotRegisteredError) as e:
        client.transfer_sync(name, hixl.WRITE, [(src, remote.data_ptr())])  # 2048 bytes into 1024
    assert isinstance(e.value, hixl.ParamInvalidError) and isinstance(e.value, hixl.NotRegisteredError)
    assert e.value.status == 103900 and e.value.name == "PARAM_INVALID"
    assert "Remote memory not registered" in str(e.value)
    assert e.value.hixl_code == hixl.errors.ERR_NOT_REGISTERED  # known by its code, not its words
    assert int(remote.count_nonzero()) == 0
    with pytest.raises(hixl.AlreadyConnectedError) as e:
        client.connect(name)
    assert isinstance(e.value, hixl.HixlAlreadyConnectedError) and e.value.status == 103903
    assert e.value.hixl_code == hixl.errors.ERR_ALREADY_CONNECTED
    with pytest.raises(hixl.NotConnectedError):
        client.transfer_sync("127.0.0.1:1", hixl.WRITE, [(src, remote.data_ptr())])
    with pytest.raises(hixl.EngineTimeoutError):
        client.connect(f"127.0.0.1:{free_port()}", timeout_ms=200)
    with pytest.raises(hixl.ParamInvalidError):
        client.transfer_sync(name, "sideways", [])
    with pytest.raises(hixl.ParamInvalidError):
        client.transfer_sync(name, hixl.WRITE, [(src.data_ptr(), remote.data_ptr())])  # int address needs a size
    with pytest.raises(hixl.EngineUnsupportedError):
        server.register_mem(torch.zeros(8), mem_type="device")
    server.deregister_mem(handle)
    with pytest.raises(hixl.RemoteNotRegisteredError):
        client.transfer_sync(name, hixl.READ, [(src[:8], remote.data_ptr())])
    client.disconnect(name)
    with pytest.raises(hixl.NotConnectedError):
        client.send_notify(name, "a", "b")
    client.connect(name)  # and again
    client.finalize()
    with pytest.raises(hixl.EngineFailedError, match="after Engine::Finalize"):
        client.connect(name)


def test_async_transfer_that_fails(pair):
    # The engine returns FAILED with status FAILED for it; Python answers
    # TransferStatus.FAILED (no exception) and req.error says why.
    server, client, name = pair
    remote = torch.zeros(1024, dtype=torch.uint8)
    server.register_mem(remote)
    src = torch.ones(2048, dtype=torch.uint8)
    req = client.transfer_async(name, hixl.WRITE, [(src, remote.data_ptr())])  # 2048 bytes into 1024
    status = hixl.TransferStatus.WAITING
    for _ in range(1_000_000):
        status = client.get_transfer_status(req)
        if status != hixl.TransferStatus.WAITING:
            break
    assert status == hixl.TransferStatus.FAILED
    assert req.done and "Remote memory not registered" in req.error
    assert client.get_transfer_status(req) == hixl.TransferStatus.FAILED  # asked again: the same answer
    assert int(remote.count_nonzero()) == 0


def test_notification_queue_full():
    opts = {"notify_queue_depth": 2}
    with hixl.Engine() as server, hixl.Engine() as client:
        name = f"127.0.0.1:{free_port()}"
        server.initialize(name, opts)
        client.initialize("127.0.0.1")
        client.connect(name)
        client.send_notify(name, "a", "1")
        client.send_notify(name, "a", "2")
        with pytest.raises(hixl.ResourceExhaustedError, match="full"):
            client.send_notify(name, "a", "3")
        assert [n.notify_msg for n in server.get_notifies()] == ["1", "2"]


PEER = textwrap.dedent("""
    import sys, torch, hixl
    e = hixl.Engine()
    e.initialize(sys.argv[1], {"transport": sys.argv[2]})
    buf = torch.zeros(1 << 20, dtype=torch.uint8)
    e.register_mem(buf)
    print(buf.data_ptr(), flush=True)
    sys.stdin.read()  # until the test closes it (or kills us)
""")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_peer_in_another_process_killed(transport):
    name = f"127.0.0.1:{free_port()}"
    peer = subprocess.Popen([sys.executable, "-c", PEER, name, transport], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        addr = int(peer.stdout.readline())
        with hixl.Engine() as e:
            e.initialize("127.0.0.1", {"transport": transport, "timeout_ms": 10000})
            e.connect(name, timeout_ms=10000)
            data = torch.arange(256, dtype=torch.uint8).repeat(4096)
            e.transfer_sync(name, hixl.WRITE, [(data, addr)], timeout_ms=10000)
            back = torch.zeros_like(data)
            e.transfer_sync(name, hixl.READ, [(back, addr)], timeout_ms=10000)
            assert torch.equal(back, data)
            peer.send_signal(signal.SIGKILL)
            peer.wait(timeout=30)
            with pytest.raises((hixl.EngineFailedError, hixl.NotConnectedError)):
                e.transfer_sync(name, hixl.WRITE, [(data, addr)], timeout_ms=10000)
            with pytest.raises(hixl.NotConnectedError, match="gone away"):
                e.transfer_sync(name, hixl.WRITE, [(data, addr)], timeout_ms=10000)
    finally:
        if peer.poll() is None:
            peer.kill()
        peer.wait(timeout=30)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_kv_transfer_example(transport):
    example = os.path.join(os.environ["HIXL_SOURCE_DIR"], "examples", "kv_transfer.py")
    out = subprocess.run([sys.executable, example, "--transport", transport, "--layers", "4", "--prompt-tokens", "256",
                          "--timeout-ms", "30000"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verified: OK" in out.stdout, out.stdout + out.stderr
    assert "128 blocks of 32 KiB" in out.stdout, out.stdout
