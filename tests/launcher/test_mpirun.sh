#!/usr/bin/env bash
# Worlds started by Open MPI's mpirun with no MASTER_ADDR/MASTER_PORT: the
# ranks find rank 0's store through mpirun's PMIx server.
#
#   bash test_mpirun.sh path/to/c_api_test [path/to/python-package-dir|-] [path/to/shmem_conformance]
#
# A 4-rank C world (the plain C test program), then, when a Python package
# directory is given (not -), a 3-rank Python world, then, when the
# OpenSHMEM conformance program is given, it under mpirun (4 PEs) and under
# Open MPI's oshrun (2 PEs), where that is installed.  Every run is time-bounded
# (mpirun kills its ranks when it is stopped).  Prints "N passed, N failed".
set -u
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 path/to/c_api_test [python-package-dir|-] [shmem_conformance]" >&2
  exit 2
fi
C_TEST=$1
PYDIR=${2:-}
[ "$PYDIR" = - ] && PYDIR=
SHMEM_PROG=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
# CI runs as root, which mpirun refuses unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Nothing here uses MPI's own transports; keep Open MPI from probing networks.
export OMPI_MCA_btl=self OMPI_MCA_pml=ob1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hixl-mpirun.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

passed=0
failed=0
run() {  # run NAME EXPECTED_LINES PATTERN COMMAND...: the command must exit 0 and print PATTERN EXPECTED_LINES times
  local name=$1 want=$2 pattern=$3
  shift 3
  timeout -k 10 150 "$@" >"$TMP/out" 2>&1
  local rc=$?
  local got
  # Count matches, not lines: mpirun forwards each rank's output as it comes
  # and two ranks' lines can share one line of its output.
  got=$(grep -o -- "$pattern" "$TMP/out" | wc -l)
  if [ "$rc" -eq 0 ] && [ "$got" -eq "$want" ]; then
    passed=$((passed + 1))
    echo "ok: $name"
  else
    failed=$((failed + 1))
    echo "FAIL: $name (exit $rc, '$pattern' seen $got of $want times)" >&2
    cat "$TMP/out" >&2
  fi
}

if ! command -v mpirun >/dev/null; then
  echo "mpirun not found (Debian: openmpi-bin)" >&2
  exit 1
fi

run "4-rank C world under mpirun" 4 ' 0 failed' mpirun -np 4 --oversubscribe "$C_TEST"
if [ -n "$PYDIR" ]; then
  run "3-rank Python world under mpirun" 3 'mpirun world: rank . of 3 ok' \
    env PYTHONPATH="$PYDIR" mpirun -np 3 --oversubscribe /usr/bin/python3 "$here/mpirun_world.py"
fi
if [ -n "$SHMEM_PROG" ]; then
  run "4-PE OpenSHMEM program under mpirun" 1 'shmem conformance: [0-9]* checks passed (4 PEs' \
    mpirun -np 4 --oversubscribe "$SHMEM_PROG"
  if command -v oshrun >/dev/null; then
    run "2-PE OpenSHMEM program under oshrun" 1 'shmem conformance: [0-9]* checks passed (2 PEs' \
      oshrun -np 2 --oversubscribe "$SHMEM_PROG"
  fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
