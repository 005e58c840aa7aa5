#!/usr/bin/python3
"""KV-cache transfer between a "prefill" and a "decode" engine (hixl.Engine).

Disaggregated inference runs the prompt (prefill) and the token-by-token
generation (decode) in different processes, often on different machines.
The prefill side computes the prompt's KV cache and must move it into the
decode side's paged cache, block by block, into whichever blocks the decode
side's allocator handed out (non-contiguous), then say that it is there.

    examples/kv_transfer.py                  # both roles, as two processes on this host
    examples/kv_transfer.py --transport ucx  # the same over UCX

The flow (the decode engine never calls anything for the transfer itself):

1. decode starts, registers its paged cache (one torch tensor), connects to
   prefill and asks for a request's KV with a notification that carries its
   cache's address, layout and the block ids it allocated;
2. prefill connects back and writes every (layer, K/V, block) of the prompt
   into those blocks with one transfer_sync of layers x 2 x blocks
   descriptors, then notifies "kv_ready" (ordered after the data);
3. decode checks every block it received and reports the time and bandwidth
   of the transfer (measured by prefill around transfer_sync).

Sizes default to a Llama-3-8B-like layout: 32 layers, 8 KV heads of 128
dims, fp16, 16-token blocks (32 KiB per block per layer and K/V), a
1024-token prompt: 4096 blocks of 32 KiB, 128 MiB.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import torch

import hixl


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def block_value(layer, kv, slot):
    """The value every element of one prompt block holds (exact in fp16)."""
    return float((layer * 2 + kv) * 64 + slot % 64 - 1024)


def layout(args):
    return dict(layers=args.layers, kv_heads=args.kv_heads, head_dim=args.head_dim,
                block_tokens=args.block_tokens, dtype="float16")


def block_elems(args):
    return args.block_tokens * args.kv_heads * args.head_dim


def options(args):
    return {"transport": args.transport, "timeout_ms": str(args.timeout_ms)}


def wait_for(engine, name, timeout_ms):
    """The first notification called `name` (others are not expected here)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise hixl.EngineTimeoutError(hixl.errors.ENGINE_TIMEOUT, f"no '{name}' notification in {timeout_ms} ms")
        for n in engine.wait_notifies(left):
            if n.name == name:
                return json.loads(n.notify_msg)


def connect(engine, remote, timeout_ms):
    """Connects to an engine that may not have started yet."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            engine.connect(remote, timeout_ms=500)
            return
        except hixl.EngineTimeoutError:
            if time.monotonic() > deadline:
                raise


def run_decode(args):
    per_block = block_elems(args)
    # The paged cache: [layer][K/V][block] -> block_tokens x kv_heads x head_dim.
    cache = torch.zeros(args.layers, 2, args.cache_blocks, per_block, dtype=torch.float16)
    # The blocks this request got from the allocator: scattered, not in order.
    g = torch.Generator().manual_seed(1234)
    block_ids = torch.randperm(args.cache_blocks, generator=g)[: args.prompt_blocks].tolist()
    with hixl.Engine() as engine:
        engine.initialize(args.decode, options(args))
        engine.register_mem(cache)
        connect(engine, args.prefill, args.timeout_ms)
        engine.send_notify(args.prefill, "kv_request", json.dumps(dict(
            request="req-0", reply_to=args.decode, cache_addr=cache.data_ptr(), cache_blocks=args.cache_blocks,
            block_ids=block_ids, **layout(args))))
        done = wait_for(engine, "kv_ready", args.timeout_ms)
        # Every received block holds its value; every other block is still zero.
        bad = 0
        for layer in range(args.layers):
            for kv in range(2):
                got = cache[layer, kv, block_ids]  # (prompt_blocks, per_block)
                want = torch.tensor([block_value(layer, kv, s) for s in range(args.prompt_blocks)],
                                    dtype=torch.float16).unsqueeze(1)
                bad += int((got != want).any(dim=1).sum())
        untouched = torch.ones(args.cache_blocks, dtype=torch.bool)
        untouched[block_ids] = False
        stray = int(cache[:, :, untouched].count_nonzero())
        nbytes, seconds = done["bytes"], done["seconds"]
        print(f"decode: {done['descriptors']} blocks of {per_block * 2 // 1024} KiB "
              f"({nbytes / 2**20:.0f} MiB, {args.layers} layers x K/V x {args.prompt_blocks} blocks) "
              f"received over {done['transport']} in {seconds * 1e3:.1f} ms = {nbytes / seconds / 1e9:.2f} GB/s "
              f"({done['copy_seconds'] / seconds:.0%} of a local copy of the same blocks, "
              f"{nbytes / done['copy_seconds'] / 1e9:.2f} GB/s); "
              f"verified: {'OK' if bad == 0 and stray == 0 else f'{bad} wrong blocks, {stray} stray values'}",
              flush=True)
        return 0 if bad == 0 and stray == 0 else 1


def run_prefill(args):
    per_block = block_elems(args)
    with hixl.Engine() as engine:
        engine.initialize(args.prefill, options(args))
        req = wait_for(engine, "kv_request", args.timeout_ms)
        # "Compute" the prompt's KV: contiguous here, one block after another.
        kv_local = torch.empty(req["layers"], 2, len(req["block_ids"]), per_block, dtype=torch.float16)
        for layer in range(req["layers"]):
            for kv in range(2):
                for s in range(len(req["block_ids"])):
                    kv_local[layer, kv, s].fill_(block_value(layer, kv, s))
        block_bytes = per_block * kv_local.element_size()
        descs = []
        for layer in range(req["layers"]):
            for kv in range(2):
                for s, b in enumerate(req["block_ids"]):
                    remote = req["cache_addr"] + ((layer * 2 + kv) * req["cache_blocks"] + b) * block_bytes
                    descs.append(hixl.TransferOpDesc(kv_local[layer, kv, s].data_ptr(), remote, block_bytes))
        engine.register_mem(kv_local)  # not needed for shm; lets UCX use registered memory
        engine.connect(req["reply_to"], timeout_ms=args.timeout_ms)
        engine.transfer_sync(req["reply_to"], hixl.WRITE, descs, timeout_ms=args.timeout_ms)  # warm-up
        times = []
        for rep in range(3):
            t0 = time.perf_counter()
            engine.transfer_sync(req["reply_to"], hixl.WRITE, descs, timeout_ms=args.timeout_ms)
            times.append(time.perf_counter() - t0)
        seconds = sorted(times)[1]  # the median of 3
        # The reference: the same blocks copied within this process into a
        # cache of the same layout (one core, torch's copy), timed the same way.
        scratch = torch.zeros(req["layers"], 2, req["cache_blocks"], per_block, dtype=torch.float16)
        ids = torch.tensor(req["block_ids"])
        torch.set_num_threads(1)
        times = []
        for rep in range(4):  # the first touches the pages
            t0 = time.perf_counter()
            for layer in range(req["layers"]):
                for kv in range(2):
                    scratch[layer, kv].index_copy_(0, ids, kv_local[layer, kv])
            times.append(time.perf_counter() - t0)
        copy_seconds = sorted(times[1:])[1]
        engine.send_notify(req["reply_to"], "kv_ready", json.dumps(dict(
            request=req["request"], descriptors=len(descs), bytes=len(descs) * block_bytes, seconds=seconds,
            copy_seconds=copy_seconds, transport=args.transport)))
        print(f"prefill: wrote {len(descs)} blocks in {seconds * 1e3:.1f} ms (median of 3)", flush=True)
        return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=["both", "prefill", "decode"], default="both")
    p.add_argument("--prefill", help="prefill engine ip:port (default: a free port on 127.0.0.1)")
    p.add_argument("--decode", help="decode engine ip:port (default: a free port on 127.0.0.1)")
    p.add_argument("--transport", default="auto", choices=["auto", "shm", "ucx"])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-tokens", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--cache-blocks", type=int, default=0, help="decode cache size in blocks (default 2x the prompt's)")
    p.add_argument("--timeout-ms", type=int, default=60000)
    args = p.parse_args()
    args.prompt_blocks = -(-args.prompt_tokens // args.block_tokens)
    args.cache_blocks = args.cache_blocks or 2 * args.prompt_blocks
    if args.cache_blocks < args.prompt_blocks:
        p.error("--cache-blocks must hold the prompt's blocks")
    args.prefill = args.prefill or f"127.0.0.1:{free_port()}"
    args.decode = args.decode or f"127.0.0.1:{free_port()}"
    if args.role == "prefill":
        return run_prefill(args)
    if args.role == "decode":
        return run_decode(args)
    # Both roles, each in its own process, started one after the other.
    cmd = [sys.executable, os.path.abspath(__file__), "--prefill", args.prefill, "--decode", args.decode,
           "--transport", args.transport, "--layers", str(args.layers), "--kv-heads", str(args.kv_heads),
           "--head-dim", str(args.head_dim), "--block-tokens", str(args.block_tokens),
           "--prompt-tokens", str(args.prompt_tokens), "--cache-blocks", str(args.cache_blocks),
           "--timeout-ms", str(args.timeout_ms)]
    procs = [subprocess.Popen(cmd + ["--role", "decode"]), subprocess.Popen(cmd + ["--role", "prefill"])]
    try:
        codes = [proc.wait(timeout=args.timeout_ms / 1000 * 3) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
