"""The snippet of issue 4 and docs/python.md, run exactly as written by two
ranks (hixlrun -n 2)."""

import torch

SNIPPET = '''
import os, torch, hixl
hixl.init()
rank = hixl.rank()
buf = torch.zeros(1_000_000)
hixl.register_memory(buf.data_ptr(), buf.numel() * 4)
hixl.barrier()
peer_addrs = hixl.allgather(buf.data_ptr())          # one address per rank
if rank == 0:
    src = torch.arange(1_000_000, dtype=torch.float32)
    hixl.put(dst_rank=1, src_addr=src.data_ptr(), dst_addr=peer_addrs[1], size=src.numel() * 4)
    hixl.fence()
hixl.barrier()
if rank == 1:
    assert buf[123] == 123
    out = torch.empty(10)
    hixl.get(src_rank=0, src_addr=peer_addrs[0], dst_addr=out.data_ptr(), size=40)
    hixl.fence()
hixl.finalize()
'''


def test_issue_snippet():
    ns = {}
    exec(compile(SNIPPET, "snippet", "exec"), ns)
    assert ns["hixl"].world_size.__name__ == "world_size"
    if ns["rank"] == 1:
        assert torch.equal(ns["buf"], torch.arange(1_000_000, dtype=torch.float32))
        assert ns["out"].tolist() == [0.0] * 10  # rank 0's buffer was never written
    else:
        assert ns["buf"].sum() == 0
