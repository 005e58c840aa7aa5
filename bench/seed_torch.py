#!/usr/bin/python3
"""seed_torch.py: the seed's own pattern: registered torch tensors put and got
between two ranks, against torch.distributed gloo send/recv, in one run.

    PYTHONPATH=build/python build/tools/hixlrun -n 2 /usr/bin/python3 bench/seed_torch.py \\
        [--sizes 100MB,1GB] [--reps 5] [--output FILE]

Every rank makes float32 tensors of each size, writes them, and only then
registers them with hixl.register_memory(t.data_ptr(), nbytes), as the seed's
program does with its parameters; addresses are exchanged with
hixl.allgather.  Rank 0 then, in turns within each repetition (so that load
from other work falls on all three alike):
  * hixl put: hixl.put of its tensor into rank 1's, then hixl.fence();
  * hixl get: hixl.get of rank 1's tensor into its own, then hixl.fence();
  * gloo: dist.send of its tensor to rank 1 (dist.recv there), then a one-byte
    reply from rank 1, so the time covers the arrival;
each timed as the median over --reps repetitions of --iters transfers, with
the received data checked after each.  Prints milliseconds per transfer,
GB/s and hixl over gloo (issue 17's target: >= 3x at every row), and the
1-minute load average.  Use Debian's /usr/bin/python3 (python3-torch).
Exit status 1 on a verification failure.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9,
         "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_size(text):
    t = text.strip().lower()
    digits = len(t) - len(t.lstrip("0123456789"))
    if digits == 0 or t[digits:] not in UNITS:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 100MB, 1GB, 64M)")
    n = int(t[:digits]) * UNITS[t[digits:]]
    if n == 0 or n % 4:
        raise argparse.ArgumentTypeError(f"size '{text}' must be a positive multiple of 4 (float32 tensors)")
    return n


def size_name(n):
    for unit, name in ((1 << 30, "GiB"), (10 ** 9, "GB"), (1 << 20, "MiB"), (10 ** 6, "MB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100MB,1GB", help="tensor sizes in bytes (default 100MB,1GB)")
    p.add_argument("--reps", type=int, default=5, help="repetitions per figure (default 5)")
    p.add_argument("--iters", type=int, default=0, help="transfers per repetition (default: 5 below 512 MiB, else 2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed transfers of each kind first (default 1)")
    p.add_argument("--output", "-o", help="write the figures as JSON (rank 0)")
    args = p.parse_args()
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))

    import torch
    import torch.distributed as dist
    import hixl

    torch.set_num_threads(1)
    hixl.init()
    rank, world = hixl.rank(), hixl.world_size()
    if world != 2:
        print("seed_torch: run with two ranks (hixlrun -n 2)", file=sys.stderr)
        hixl.finalize()
        return 2
    # gloo's own rendezvous, on a port rank 0 picks (MASTER_PORT is hixl's store).
    port = hixl.allgather(free_port() if rank == 0 else 0)[0]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    ack = torch.zeros(1, dtype=torch.uint8)
    flag = torch.zeros(1, dtype=torch.int64)
    load_start = os.getloadavg()
    started = time.monotonic()
    rows = []
    ok = True
    if rank == 0:
        print(f"seed_torch: torch {torch.__version__}, HIXL_TRANSPORT={os.environ.get('HIXL_TRANSPORT', 'auto')}, "
              f"HIXL_COPY_THREADS={os.environ.get('HIXL_COPY_THREADS', 'auto (unset)')}; registered float32 "
              f"tensors written before registration; rank 0 -> rank 1; medians of {args.reps}", flush=True)

    def agree(good):
        flag[0] = 1 if good else 0
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return int(flag[0]) == 1

    for size in sizes:
        n = size // 4
        iters = args.iters or (5 if size < (512 << 20) else 2)
        # Written before registration, as a model's parameters are.
        mine = torch.full((n,), float(rank + 1), dtype=torch.float32)
        hixl.register_memory(mine.data_ptr(), size)
        addrs = hixl.allgather(mine.data_ptr())
        times = {"put": [], "get": [], "gloo": []}

        def hixl_put(k):
            for _ in range(k):
                hixl.put(dst_rank=1, src_addr=mine.data_ptr(), dst_addr=addrs[1], size=size)
                hixl.fence()

        def hixl_get(k):
            for _ in range(k):
                hixl.get(src_rank=1, src_addr=addrs[1], dst_addr=mine.data_ptr(), size=size)
                hixl.fence()

        def gloo(k):
            for _ in range(k):
                if rank == 0:
                    dist.send(mine, 1)
                else:
                    dist.recv(mine, 0)
            if rank == 0:
                dist.recv(ack, 1)
            else:
                dist.send(ack, 0)

        def timed(kind, fn, k, value):
            """Rank 0 runs fn (both ranks for gloo); value: what each element must hold afterwards (checked on
            the receiver)."""
            nonlocal ok
            # Set the receiver's tensor apart from the value that must arrive.
            receiver = 0 if kind == "get" else 1
            sender = 1 - receiver
            if rank == sender:
                mine.fill_(value)
            elif rank == receiver:
                mine.fill_(-1.0)
            hixl.barrier()
            dist.barrier()
            t0 = time.perf_counter()
            if kind == "gloo" or rank == 0:
                fn(k)
            t = time.perf_counter() - t0
            hixl.barrier()  # every put has landed
            good = rank != receiver or bool(torch.all(mine == value))
            if not agree(good):
                if rank == 0:
                    print(f"seed_torch: VERIFICATION FAILED: {kind} of {size_name(size)}", file=sys.stderr)
                ok = False
            return t / k

        for kind, fn in (("put", hixl_put), ("get", hixl_get), ("gloo", gloo)):
            timed(kind, fn, args.warmup, 3.0)
        for r in range(args.reps):
            for kind, fn in (("put", hixl_put), ("get", hixl_get), ("gloo", gloo)):
                times[kind].append(timed(kind, fn, iters, float(10 + r)))
        hixl.barrier()
        hixl.deregister_memory(mine.data_ptr())
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"size": size, "size_name": size_name(size), "iters": iters,
               "ms": {k: v * 1e3 for k, v in med.items()},
               "GBps": {k: size / v / 1e9 for k, v in med.items()},
               "vs_gloo": {"put": med["gloo"] / med["put"], "get": med["gloo"] / med["get"]},
               "ms_all": {k: [x * 1e3 for x in v] for k, v in times.items()}}
        rows.append(row)
        if rank == 0:
            print(f"{size_name(size):>8}: hixl put {row['ms']['put']:.1f} ms ({row['GBps']['put']:.2f} GB/s), "
                  f"get {row['ms']['get']:.1f} ms ({row['GBps']['get']:.2f} GB/s); gloo send/recv "
                  f"{row['ms']['gloo']:.1f} ms ({row['GBps']['gloo']:.2f} GB/s): put {row['vs_gloo']['put']:.2f}x, "
                  f"get {row['vs_gloo']['get']:.2f}x gloo", flush=True)
        mine = None
    load_end = os.getloadavg()
    if rank == 0:
        print("\n| size | hixl put | hixl get | gloo send/recv | put vs gloo | get vs gloo | >= 3x |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | :---: |")
        for row in rows:
            met = min(row["vs_gloo"].values()) >= 3
            print(f"| {row['size_name']} | {row['ms']['put']:.1f} ms | {row['ms']['get']:.1f} ms | "
                  f"{row['ms']['gloo']:.1f} ms | {row['vs_gloo']['put']:.2f}x | {row['vs_gloo']['get']:.2f}x | "
                  f"{'yes' if met else '**no**'} |")
        print(f"\n1-minute load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end")
        if args.output:
            with open(args.output, "w") as f:
                json.dump({"tool": "seed_torch.py", "torch": torch.__version__,
                           "transport_env": os.environ.get("HIXL_TRANSPORT", "auto"),
                           "copy_threads_env": os.environ.get("HIXL_COPY_THREADS", ""),
                           "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                           "elapsed_s": time.monotonic() - started, "reps": args.reps,
                           "loadavg_at_start": list(load_start), "loadavg_at_end": list(load_end),
                           "results": rows, "verified": ok}, f, indent=1)
                f.write("\n")
            print(f"wrote {args.output}")
    dist.destroy_process_group()
    hixl.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
