#!/usr/bin/env bash
# `pip install --no-build-isolation .` into a venv made with
# --system-site-packages (Debian's setuptools, wheel and pybind11; no
# network) gives an `import hixl` that works outside the build tree, and a
# `hixlrun` command that starts a world with it.
#
#   bash pip_test.sh SOURCE_DIR [WORK_DIR]
#
# WORK_DIR (default: $TMPDIR or /tmp) holds the copy of the sources, the
# venv and the build while it runs.  With ccache installed (scripts/build
# uses it too), the package's CMake build goes through it with SOURCE_DIR as
# base_dir and builds in SOURCE_COPY/build: when WORK_DIR is under
# SOURCE_DIR (ctest gives it a folder of the build tree) and a build of
# SOURCE_DIR/build with the same compiler and flags (Release) went through
# ccache, every object comes from the cache, the relative paths being the
# same.  CMake still configures, links and installs the package as pip's
# build does anywhere else.
set -euo pipefail
src=$(cd "$1" && pwd)
work=${2:-${TMPDIR:-/tmp}}
mkdir -p "$work"
tmp=$(mktemp -d "$work/hixl-pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# A copy of the sources (what git tracks, plus new files it does not ignore),
# so that the build leaves nothing in the checkout.
mkdir "$tmp/src"
(cd "$src" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$tmp/src"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
if command -v ccache >/dev/null && [[ ${HIXL_CCACHE:-1} != 0 ]]; then
  export CCACHE_BASEDIR=$src CCACHE_DEPEND=true HIXL_CMAKE_BUILD_DIR=$tmp/src/build
  export HIXL_CMAKE_ARGS="${HIXL_CMAKE_ARGS:-} -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi
start=$SECONDS
"$tmp/venv/bin/python" -m pip install --no-build-isolation --no-index -q "$tmp/src"
echo "pip install took $((SECONDS - start)) s"
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
