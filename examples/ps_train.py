#!/usr/bin/env python3
"""Parameter-server training over hixl's one-sided put/get.

Rank 0 is the parameter server, every other rank a worker.  The model is a
small MLP (torch) trained on the handwritten-digits set that ships with
scikit-learn (sklearn.datasets.load_digits: 1797 8x8 images, no download);
each worker trains on its own shard of the training set.

Every worker registers two flat buffers with hixl: its parameters (the
model's weights are views into it) and its gradient (with the batch's loss
and size at the end).  Every rank also allocates the same small block of
symmetric memory for signal words: word 0 is "the parameters for step s
have arrived" (a worker's), word w is "worker w's gradient of step s is
ready" (the server's).  No barrier per step; one step s:

  workers  hixl.wait_until(word 0 >= s): the server's put has landed; then
           compute the gradient of their batch into their gradient buffer
           and hixl.atomic_set(word w on the server, s)
  server   for every worker: hixl.wait_until(word w >= s), then hixl.get()
           its gradient (the worker takes no part); averages, takes an SGD
           step, and hixl.put_signal()s the new parameters into every
           worker's parameter buffer with word 0 set to s + 1: whoever sees
           the signal sees the parameters

    hixlrun -n 4 /usr/bin/python3 examples/ps_train.py            # 1 server + 3 workers
    hixlrun -n 2 /usr/bin/python3 examples/ps_train.py            # 1 server + 1 worker
    hixlrun -n 2 /usr/bin/python3 examples/ps_train.py --params 100M --steps 30

(from the build tree; see docs/python.md).  --params N grows the model to
about N parameters to show bandwidth (100M: 400 MB of float32 moved each way
per worker and step).  It adds the "wide" half of a wide-and-deep model: a
hashed table of pixel-pair cross features, N/10 rows of 10 logits.  The table
is trained like the rest, but a step touches only its batch's rows, while
every step still moves the whole dense buffer, as a dense parameter server
does.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

try:
    import hixl
except ImportError:
    # Run from a source checkout without PYTHONPATH: use the package in the
    # build tree (scripts/build puts it in build/python; HIXL_BUILD_DIR overrides).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    os.environ.get("HIXL_BUILD_DIR", "build"), "python"))
    import hixl

N_FEATURES = 64
N_CLASSES = 10


def parse_count(text):
    """'100M' -> 100_000_000, '2.5k' -> 2500, '4810' -> 4810."""
    text = text.strip().lower()
    scale = {"k": 10**3, "m": 10**6, "g": 10**9}.get(text[-1:], 1)
    return int(float(text[:-1] if scale != 1 else text) * scale)


def human_bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"


def memcpy_rate(nbytes, reps=5):
    """One core's memcpy (libc's, through ctypes) of nbytes between two
    buffers already written: bytes per second, the median of reps."""
    import ctypes
    src = torch.ones(max(1, nbytes // 4))
    dst = torch.zeros_like(src)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.numel() * 4)
        times.append(time.perf_counter() - t)
    return src.numel() * 4 / sorted(times)[len(times) // 2]


class MLP(torch.nn.Module):
    """64 -> hidden (ReLU) -> 10."""

    def __init__(self, hidden):
        super().__init__()
        self.fc1 = torch.nn.Linear(N_FEATURES, hidden)
        self.fc2 = torch.nn.Linear(hidden, N_CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def mlp_params(hidden):
    return N_FEATURES * hidden + hidden + hidden * N_CLASSES + N_CLASSES


# The pixel pairs (i < j) whose quantised intensities the wide part crosses.
PAIR_I, PAIR_J = np.triu_indices(N_FEATURES, k=1)  # 2016 pairs


def cross_features(images, rows):
    """Hashed pixel-pair cross features, as in the 'wide' half of a
    wide-and-deep model: each pixel is quantised to 4 levels and every pair
    (i, j, level_i, level_j) is hashed to one of `rows` table rows.
    (n, 64) images with values 0..16 -> (n, 2016) int64 row ids."""
    q = np.minimum(images.astype(np.int64) // 4, 3)
    code = (PAIR_I * N_FEATURES + PAIR_J) * 16 + q[:, PAIR_I] * 4 + q[:, PAIR_J]
    return torch.from_numpy((code * 2654435761 + 97) % rows)


class WideAndDeep(torch.nn.Module):
    """The MLP plus, with `rows` > 0, a hashed table of cross features
    (rows x 10 parameters) whose rows add to the logits.  The table's sum is
    scaled by 1/sqrt(2016) so that one learning rate fits both halves.  Its
    gradient is sparse (only the batch's rows), and it goes straight into the
    dense flat gradient buffer."""

    def __init__(self, hidden, rows):
        super().__init__()
        self.deep = MLP(hidden)
        self.wide = torch.nn.EmbeddingBag(rows, N_CLASSES, mode="sum", sparse=True) if rows else None
        if self.wide is not None:
            torch.nn.init.zeros_(self.wide.weight)
            self.wide_scale = 1.0 / len(PAIR_I) ** 0.5

    def forward(self, x, ids):
        out = self.deep(x)
        if self.wide is not None:
            out = out + self.wide(ids) * self.wide_scale
        return out


def bind_to_flat(model, flat):
    """Makes every parameter of `model` a view into the 1-D tensor `flat`
    (copying the current values in), so that writing `flat` -- e.g. a peer's
    hixl.put -- updates the model without a copy."""
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            flat[offset:offset + n].copy_(p.reshape(-1))
            p.data = flat[offset:offset + n].view_as(p)
            offset += n
    assert offset == flat.numel()


def bind_grads_to_flat(model, flat):
    """Makes every parameter's .grad a view into `flat`; backward() then
    accumulates straight into it.  Returns the views, to check after backward."""
    views, offset = [], 0
    for p in model.parameters():
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p)
        views.append((p, flat[offset:offset + n]))
        offset += n
    return views


def sub(t, index):
    return None if t is None else t[index]


def evaluate(model, x, ids, y, chunk=256):
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(x), chunk):
            out = model(x[i:i + chunk], ids[i:i + chunk] if ids is not None else None)
            loss += F.cross_entropy(out, y[i:i + chunk], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + chunk]).sum().item()
    return correct / len(x), loss / len(x), correct


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    ap.add_argument("--batch", type=int, default=96,
                    help="global batch per step, split over the workers (default 96)")
    ap.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    ap.add_argument("--hidden", type=int, default=64, help="hidden units (default 64: 4810 parameters)")
    ap.add_argument("--params", type=str, default=None,
                    help="grow the model to about this many parameters (e.g. 100M) with the wide half of a "
                         "wide-and-deep model: a hashed table of pixel-pair features")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=None, help="print every N steps (default: ~15 lines)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per rank (default: cores / local ranks)")
    ap.add_argument("--summary-json", default=None, help="rank 0 writes the results there (for tests)")
    args = ap.parse_args()

    hixl.init()
    rank, size = hixl.rank(), hixl.world_size()
    if size < 2:
        if rank == 0:
            print("ps_train needs a server and at least one worker: hixlrun -n 2 (or more) ...", file=sys.stderr)
        hixl.finalize()
        return 2
    n_workers = size - 1
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local_ranks))
    log_every = args.log_every or max(1, args.steps // 15)

    hidden = args.hidden
    rows = max(1, (parse_count(args.params) - mlp_params(hidden)) // N_CLASSES) if args.params else 0
    P = mlp_params(hidden) + rows * N_CLASSES
    what = f"MLP 64-{hidden}-10" + (f" + a {rows:,} x 10 hashed cross-feature table" if rows else "")

    # The same data split and the same initial model on every rank.
    digits = load_digits()
    x_all = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y_all = torch.tensor(digits.target, dtype=torch.long)
    ids_all = cross_features(digits.data, rows) if rows else None
    idx_train, idx_test = train_test_split(np.arange(len(y_all)), test_size=0.25, random_state=args.seed,
                                           stratify=digits.target)
    torch.manual_seed(args.seed)
    model = WideAndDeep(hidden, rows)
    flat = torch.zeros(P)                  # this rank's parameters; the model's weights are views of it
    bind_to_flat(model, flat)
    # Signal words, in symmetric memory (every rank allocates the same block,
    # so its address is the same everywhere): word 0 on a worker counts the
    # parameters that arrived, word w on the server worker w's gradients.
    signals = hixl.alloc(8 * size)
    words = signals.numpy(np.uint64)
    words[:] = 0                           # before the allgathers below, so before any signal

    if rank == 0:
        # ------------------------------------------------------------ server
        print(f"[server] {n_workers} worker(s), {what}: {P:,} parameters "
              f"({human_bytes(P * 4)}), {len(idx_train)} training / {len(idx_test)} test images, "
              f"global batch {args.batch}, {args.steps} steps", flush=True)
        param_addrs = hixl.allgather(0)[1:]
        grad_addrs = hixl.allgather(0)[1:]
        # The first parameters go to every worker (they all start from the
        # server's): "the parameters for step 1".
        t = time.perf_counter()
        for w in range(1, size):
            hixl.put_signal(dst_rank=w, src_addr=flat, dst_addr=param_addrs[w - 1],
                            sig_addr=signals, value=1, op=hixl.SIGNAL_SET)
        hixl.fence()
        put_s, put_bytes = time.perf_counter() - t, n_workers * P * 4
        first_put_s = put_s                    # before the steps: not in the per-step times

        master = torch.nn.Parameter(flat, requires_grad=False)  # shares memory with flat
        opt = torch.optim.SGD([master], lr=args.lr, momentum=args.momentum)
        recv = torch.zeros(n_workers, P + 2)  # each worker's [gradient..., loss sum, batch size]
        master.grad = torch.zeros(P)
        update_s = 0.0
        get_s, get_bytes, ops = 0.0, 0, n_workers
        losses = []
        wall = time.perf_counter()
        for step in range(1, args.steps + 1):
            for w in range(1, size):
                # Worker w's gradient of this step is ready once it set word w
                # to `step`; then get it (the worker takes no part).
                hixl.wait_until(words[w:w + 1], hixl.CMP_GE, step)
                t = time.perf_counter()
                hixl.get(src_rank=w, src_addr=grad_addrs[w - 1], dst_addr=recv[w - 1])
                get_s += time.perf_counter() - t
            t = time.perf_counter()
            hixl.fence()
            get_s += time.perf_counter() - t
            get_bytes += n_workers * (P + 2) * 4

            t = time.perf_counter()
            counts = recv[:, P + 1]
            total = counts.sum().item()
            loss = recv[:, P].sum().item() / total
            losses.append(loss)
            # The batch-size-weighted mean of the workers' mean gradients.
            torch.mul(recv[0, :P], counts[0].item() / total, out=master.grad)
            for i in range(1, n_workers):
                master.grad.add_(recv[i, :P], alpha=counts[i].item() / total)
            opt.step()
            update_s += time.perf_counter() - t

            # The new parameters, and with them word 0 on each worker set to
            # step + 1: "the parameters for the next step have arrived".  The
            # fence completes the puts before the next step changes `flat`.
            t = time.perf_counter()
            for w in range(1, size):
                hixl.put_signal(dst_rank=w, src_addr=flat, dst_addr=param_addrs[w - 1],
                                sig_addr=signals, value=step + 1, op=hixl.SIGNAL_SET)
            hixl.fence()
            put_s += time.perf_counter() - t
            put_bytes += n_workers * P * 4
            ops += 2 * n_workers

            if step % log_every == 0 or step == 1 or step == args.steps:
                moved = get_bytes + put_bytes
                rate = moved / max(get_s + put_s, 1e-9)
                print(f"[server] step {step:4d}/{args.steps}  loss {loss:.4f}  "
                      f"moved {human_bytes(moved)} ({human_bytes(rate)}/s in transfers)", flush=True)
        wall = time.perf_counter() - wall

        torch.set_num_threads(os.cpu_count() or 1)  # the workers are done
        acc, test_loss, correct = evaluate(model, x_all[idx_test], sub(ids_all, idx_test), y_all[idx_test])
        moved = get_bytes + put_bytes
        print(f"[server] loss {losses[0]:.4f} -> {losses[-1]:.4f} (mean of the last 10 steps: "
              f"{sum(losses[-10:]) / len(losses[-10:]):.4f}); test loss {test_loss:.4f}", flush=True)
        print(f"[server] final test accuracy: {100 * acc:.2f}% ({correct}/{len(idx_test)}) with "
              f"{n_workers} worker(s)", flush=True)
        print(f"[server] moved {human_bytes(moved)} in {ops} one-sided transfers: "
              f"get {human_bytes(get_bytes)} at {human_bytes(get_bytes / max(get_s, 1e-9))}/s, "
              f"put {human_bytes(put_bytes)} at {human_bytes(put_bytes / max(put_s, 1e-9))}/s; "
              f"{args.steps} steps in {wall:.2f} s ({1000 * wall / args.steps:.1f} ms/step: "
              f"{1000 * (get_s + put_s - first_put_s) / args.steps:.1f} ms transfers, "
              f"{1000 * update_s / args.steps:.1f} ms update, "
              f"the rest waiting for the workers)", flush=True)
        # The reference: one core's memcpy of one transfer's size, in this
        # run (the workers are done, as they were idle during transfers).
        ref = memcpy_rate(P * 4)
        rate = moved / max(get_s + put_s, 1e-9)
        print(f"[server] transfers at {human_bytes(rate)}/s are {rate / ref:.2f}x one core's memcpy of the same "
              f"size measured now ({human_bytes(ref)}/s)", flush=True)
        if args.summary_json:
            with open(args.summary_json, "w") as f:
                json.dump({"workers": n_workers, "params": P, "steps": args.steps, "losses": losses,
                           "test_accuracy": acc, "test_loss": test_loss, "bytes_get": get_bytes,
                           "bytes_put": put_bytes, "seconds_get": get_s, "seconds_put": put_s,
                           "seconds_update": update_s, "seconds_wall": wall,
                           "memcpy_bytes_per_s": ref}, f)
    else:
        # ------------------------------------------------------------ worker
        me = rank - 1
        shard = torch.tensor(idx_train[me::n_workers])
        batch = max(1, args.batch // n_workers)
        grads = torch.zeros(P + 2)  # [gradient..., loss sum, batch size]: the server gets it
        hixl.register_memory(flat)
        hixl.register_memory(grads)
        hixl.allgather(flat.data_ptr())
        hixl.allgather(grads.data_ptr())
        grad_views = bind_grads_to_flat(model, grads[:P])
        print(f"[worker {rank}] {len(shard)} training images, batch {batch}", flush=True)

        gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
        order, pos = torch.randperm(len(shard), generator=gen), 0
        for step in range(1, args.steps + 1):
            # Sleeps (no spinning core) until the server's put_signal of the
            # parameters for this step has landed in `flat`.
            hixl.wait_until(signals, hixl.CMP_GE, step)
            if pos + batch > len(shard):
                order, pos = torch.randperm(len(shard), generator=gen), 0
            sel = shard[order[pos:pos + batch]]
            pos += batch
            grads.zero_()
            out = model(x_all[sel], sub(ids_all, sel))
            loss = F.cross_entropy(out, y_all[sel])
            loss.backward()                    # accumulates into `grads` (the .grad are views of it)
            for p, view in grad_views:
                if p.grad.data_ptr() != view.data_ptr():  # autograd replaced the view: copy
                    g = p.grad.to_dense() if p.grad.is_sparse else p.grad
                    view.copy_(g.reshape(-1))
                    p.grad = view.view_as(p)
            grads[P] = loss.item() * len(sel)
            grads[P + 1] = len(sel)
            # Gradient ready: tell the server (word `rank` of its block).  It
            # gets the gradient before it puts the next parameters, so
            # `grads` is not overwritten before it has been read.
            hixl.atomic_set(0, signals.addr + 8 * rank, step)
        hixl.wait_until(signals, hixl.CMP_GE, args.steps + 1)  # the final parameters
        acc, _, _ = evaluate(model, x_all[idx_test], sub(ids_all, idx_test), y_all[idx_test])
        print(f"[worker {rank}] done; the parameters it holds score {100 * acc:.2f}% on the test set", flush=True)

    hixl.barrier()                             # nobody touches a peer's memory any more
    if rank != 0:
        hixl.deregister_memory(grads)
        hixl.deregister_memory(flat)
    del words
    signals.free()
    hixl.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
