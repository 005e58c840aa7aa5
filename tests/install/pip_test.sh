#!/usr/bin/env bash
# `pip install --no-build-isolation .` into a venv made with
# --system-site-packages (Debian's setuptools, wheel and pybind11; no
# network) gives an `import hixl` that works outside the build tree, and a
# `hixlrun` command that starts a world with it.
#
#   bash pip_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hixl-pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# A copy of the sources (what git tracks, plus new files it does not ignore),
# so that the build leaves nothing in the checkout.
mkdir "$tmp/src"
(cd "$src" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$tmp/src"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --no-build-isolation --no-index -q "$tmp/src"
rm -rf "$tmp/src"
cd "$tmp"
unset PYTHONPATH RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
where=$("$tmp/venv/bin/python" -c 'import hixl; print(hixl.__file__)')
echo "import hixl -> $where"
[[ $where == "$tmp/venv/"* ]]
"$tmp/venv/bin/python" -c 'import hixl; hixl.init(); assert hixl.world_size() == 1; hixl.finalize()'
cat > world.py <<'PY'
import ctypes, hixl
hixl.init()
r, n = hixl.rank(), hixl.world_size()
buf = (ctypes.c_int64 * n)()
hixl.register_memory(ctypes.addressof(buf), ctypes.sizeof(buf))
addrs = hixl.allgather(ctypes.addressof(buf))
v = ctypes.c_int64(7 + r)
for p in range(n):
    hixl.put(dst_rank=p, src_addr=ctypes.addressof(v), dst_addr=addrs[p] + 8 * r, size=8)
hixl.barrier()
assert list(buf) == [7 + i for i in range(n)], list(buf)
hixl.finalize()
import os
os.write(1, b"pip world ok %d\n" % r)  # one write: the two ranks share a pipe
PY
out=$("$tmp/venv/bin/hixlrun" -n 2 --timeout 120 "$tmp/venv/bin/python" world.py)
echo "$out"
[[ $(grep -o 'pip world ok [01]' <<<"$out" | sort -u | wc -l) -eq 2 ]]
echo "1 passed, 0 failed"
