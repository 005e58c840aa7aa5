#!/usr/bin/python3
"""gloo_ref.py: the two-sided torch.distributed (gloo) reference of hixl_perf.

    /usr/bin/python3 bench/gloo_ref.py --max 1G --output gloo.json

Runs dist.send/dist.recv between two processes (rank 0 -> rank 1) on this
host with the gloo backend, with the protocol and JSON of bench/mpi_pingpong:

* latency: ping-pong, rank 0 sends N bytes, rank 1 sends them back; half the
  round trip;
* bandwidth and message rate: rank 0 sends a batch of N-byte tensors, rank 1
  receives them and answers with a one-byte tensor; bytes over the batch's
  time on rank 0.

Each figure is the median over --reps batches after warm-up; the received data
of every batch is verified (exit status 1 on a mismatch).  Needs the Debian
interpreter /usr/bin/python3, which has python3-torch and python3-numpy.
"""
import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time

KI, MI, GI = 1024, 1024 ** 2, 1024 ** 3
UNITS = {"": 1, "b": 1, "k": KI, "ki": KI, "kib": KI, "m": MI, "mi": MI, "mib": MI, "g": GI, "gi": GI,
         "gib": GI, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9}
STEP = 0x9E3779B97F4A7C15
MASK = (1 << 64) - 1


def parse_size(text):
    """The size syntax of hixl_perf: 8, 4K/4KiB, 100MB (decimal), 1G/1GiB."""
    t = text.strip().lower().replace("_", "").replace(" ", "")
    digits = len(t) - len(t.lstrip("0123456789"))
    if digits == 0 or t[digits:] not in UNITS or int(t[:digits]) == 0:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 8, 4K, 1MiB, 100MB, 1G)")
    return int(t[:digits]) * UNITS[t[digits:]]


def size_name(n):
    for unit, name in ((GI, "GiB"), (10 ** 9, "GB"), (MI, "MiB"), (10 ** 6, "MB"), (KI, "KiB"), (10 ** 3, "KB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def sizes_from(args):
    if args.sizes:
        out = [parse_size(s) for s in args.sizes.split(",")]
    else:
        lo, hi = parse_size(args.min), parse_size(args.max)
        out, s = [], 1
        while s <= hi:
            if s >= lo:
                out.append(s)
            s *= 2
    if args.add_sizes:
        out += [parse_size(s) for s in args.add_sizes.split(",")]
    return sorted(set(out))


def seed(batch, rank):
    """bench_common.h's Seed()."""
    x = (batch * 0x100000001B3 + rank * 0xC2B2AE3D27D4EB4F + 0x165667B19E3779F9) & MASK
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK
    x ^= x >> 33
    return x


def pattern_base(np, n):
    """Word i of bench_common.h's Fill() pattern, less the seed: i * STEP."""
    w = np.arange((n + 7) // 8, dtype=np.uint64)
    w *= np.uint64(STEP)  # wraps modulo 2**64, as in C++
    return w


def pattern(np, base, n, s):
    """bench_common.h's Fill(): 64-bit word i holds s + i * STEP (little endian)."""
    return (base + np.uint64(s)).view(np.uint8)[:n]


def stats(values):
    v = sorted(values)

    def q(p):
        pos = p * (len(v) - 1)
        i = int(pos)
        f = pos - i
        return v[i] * (1 - f) + v[i + 1] * f if i + 1 < len(v) else v[i]

    return {"median": q(0.5), "min": v[0], "max": v[-1], "p10": q(0.1), "p90": q(0.9)}


def fmt(v):
    return f"{v:.0f}" if v >= 1000 else f"{v:.1f}" if v >= 100 else f"{v:.2f}" if v >= 10 else f"{v:.3f}"


def spread(s):
    return f"{fmt(s['median'])} [{fmt(s['min'])} - {fmt(s['max'])}]"


def rank_main(args, rank, port):
    import numpy as np
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=args.timeout))
    ack = torch.zeros(1, dtype=torch.uint8)
    flag = torch.zeros(1, dtype=torch.int64)
    results = []
    batch_no = 0
    started = time.monotonic()
    load_at_start = os.getloadavg()
    if rank == 0:
        print(f"gloo_ref: torch {torch.__version__} gloo send/recv rank 0 -> rank 1; {cpu_model()}")
        print(f"lat = half a ping-pong; GB/s = a batch of sends + one 1-byte reply; median [min - max] of {args.reps}")
        print("    size   lat us                     GB/s")
        sys.stdout.flush()
    for size in sizes_from(args):
        buf = torch.zeros(size, dtype=torch.uint8)
        buf_np = buf.numpy()
        base = pattern_base(np, size)

        def latency(k):
            for _ in range(k):
                if rank == 0:
                    dist.send(buf, 1)
                    dist.recv(buf, 1)
                else:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)

        def bandwidth(k):
            for _ in range(k):
                if rank == 0:
                    dist.send(buf, 1)
                else:
                    dist.recv(buf, 0)
            if rank == 0:
                dist.recv(ack, 1)
            else:
                dist.send(ack, 0)

        def agreed_iters(batch):
            # Rank 0 calibrates (hixl_perf's rule) and announces every probe.
            def announced(k):
                if rank == 0:
                    flag[0] = k
                    dist.send(flag, 1)
                batch(k)

            if rank == 0:
                for _ in range(args.warmup):
                    announced(1)
                k = 1
                want = args.batch_ms / 1000
                while True:
                    t0 = time.perf_counter()
                    announced(k)
                    t = time.perf_counter() - t0
                    if t >= want / 8 or k >= args.max_iters:
                        iters = max(1, min(args.max_iters, int(-(-want // (max(t, 1e-9) / k)))))
                        break
                    k *= 2
                flag[0] = -iters
                dist.send(flag, 1)
                return iters
            while True:
                dist.recv(flag, 0)
                k = int(flag[0])
                if k <= 0:
                    return -k
                batch(k)

        row = {"op": "sendrecv", "size": size, "size_name": size_name(size)}
        figures = {}
        for name, batch in (("lat", latency), ("bw", bandwidth)):
            iters = agreed_iters(batch)
            row["iters_" + name] = iters
            times = []
            for _ in range(args.reps):
                s = seed(batch_no, 0)
                batch_no += 1
                if rank == 0:
                    buf_np[:] = pattern(np, base, size, s)
                dist.barrier()
                t0 = time.perf_counter()
                batch(iters)
                times.append(max(time.perf_counter() - t0, 1e-9))
                # What arrived: on rank 1, the last message; for latency also
                # what came back to rank 0 (rank 0's buffer is the source of bw).
                received = rank == 1 or name == "lat"
                flag[0] = 1 if not received or np.array_equal(buf_np, pattern(np, base, size, s)) else 0
                dist.all_reduce(flag, op=dist.ReduceOp.MIN)
                if int(flag[0]) != 1:
                    if rank == 0:
                        print(f"gloo_ref: VERIFICATION FAILED at {size_name(size)}", file=sys.stderr)
                    return 1
            figures[name] = times
        row["lat_us"] = stats([t / row["iters_lat"] / 2 * 1e6 for t in figures["lat"]])
        row["bw_GBps"] = stats([row["iters_bw"] * size / t / 1e9 for t in figures["bw"]])
        if size <= args.rate_max:
            row["msg_rate_Mops"] = stats([row["iters_bw"] / t / 1e6 for t in figures["bw"]])
        results.append(row)
        if rank == 0:
            print(f"{size_name(size):>8}   {spread(row['lat_us']):<26} {spread(row['bw_GBps']):<27}")
            sys.stdout.flush()
        buf = buf_np = base = None  # free this size before the next is allocated
    if rank == 0 and args.output:
        doc = {
            "tool": "gloo_ref.py",
            "reference": "gloo",
            "label": f"torch.distributed gloo send/recv (torch {torch.__version__})",
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "elapsed_s": time.monotonic() - started,
            "machine": {"cpu_model": cpu_model(), "cpus_online": os.cpu_count(), "hostname": socket.gethostname(),
                        "kernel": f"{platform.system()} {platform.release()}",
                        "loadavg": list(os.getloadavg()), "loadavg_at_start": list(load_at_start)},
            "config": {"sizes": sizes_from(args), "reps": args.reps, "warmup": args.warmup,
                       "batch_ms": args.batch_ms},
            "results": results,
            "verified": True,
        }
        with open(args.output, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"wrote {args.output}")
    dist.destroy_process_group()
    return 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", help="sizes instead of powers of two, e.g. 8,4K,100MB,1G")
    p.add_argument("--min", default="8", help="smallest power-of-two size (default 8)")
    p.add_argument("--max", default="1G", help="largest power-of-two size (default 1G)")
    p.add_argument("--add-sizes", help="extra sizes, e.g. 100MB,1GB")
    p.add_argument("--reps", type=int, default=5, help="timed batches per figure (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up messages before each figure (default 2)")
    p.add_argument("--batch-ms", type=float, default=10, help="target length of one timed batch (default 10)")
    p.add_argument("--max-iters", type=int, default=1000000, help="most messages in one batch")
    p.add_argument("--rate-max", type=parse_size, default=4096, help="report the message rate up to this size")
    p.add_argument("--timeout", type=int, default=600, help="seconds before a stuck run fails (default 600)")
    p.add_argument("--output", "-o", help="write the results as JSON to FILE")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    try:
        sizes_from(args)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if args.rank is not None:
        return rank_main(args, args.rank, args.port)
    # The launcher: two copies of this script, one per rank.
    port = free_port()
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--port", str(port)]
    procs = [subprocess.Popen(argv + ["--rank", str(r)]) for r in (0, 1)]
    deadline = time.monotonic() + args.timeout
    rc = 0
    try:
        for proc in procs:
            rc = rc or proc.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        print(f"gloo_ref: timed out after {args.timeout} s", file=sys.stderr)
        rc = 124
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return rc


if __name__ == "__main__":
    sys.exit(main())
