"""A hixl world started by mpirun (no MASTER_* variables): every rank puts
its number into every rank's registered buffer, then checks its own."""
import numpy as np

import hixl

hixl.init()
r, n = hixl.rank(), hixl.world_size()
buf = np.zeros(n, dtype=np.int64)
hixl.register_memory(buf.ctypes.data, buf.nbytes)
addrs = hixl.allgather(buf.ctypes.data)
src = np.array([1000 + r], dtype=np.int64)
for p in range(n):
    hixl.put(dst_rank=p, src_addr=src.ctypes.data, dst_addr=addrs[p] + 8 * r, size=8)
hixl.barrier()
assert list(buf) == [1000 + i for i in range(n)], f"rank {r}: {list(buf)}"
hixl.barrier()
hixl.finalize()
print(f"mpirun world: rank {r} of {n} ok", flush=True)
