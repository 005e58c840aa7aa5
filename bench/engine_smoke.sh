#!/usr/bin/env bash
# hixl_perf --engine on small sizes: completes, verifies its data, writes
# JSON with one row per (block, op).  No timing thresholds.
set -eu
hixlrun=$1 perf=$2 out=$3
rm -f "$out"
"$hixlrun" -n 2 --timeout 300 "$perf" --engine --engine-blocks 4K,64K --engine-batch 1M --reps 2 -o "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = doc["engine_batch"]
assert [(r["block"], r["op"]) for r in rows] == [(4096, "put"), (4096, "get"), (65536, "put"), (65536, "get")], rows
for r in rows:
    for k in ("engine_gbps", "world_gbps", "memcpy_gbps"):
        assert r[k]["median"] > 0, (k, r)
print("engine smoke: %d rows OK" % len(rows))
PY
