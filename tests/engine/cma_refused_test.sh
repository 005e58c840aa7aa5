#!/usr/bin/env bash
# The engine suite over shm when the kernel refuses cross-memory attach (as
# containers often do): batches fall back to the relay.  The engines run
# without CAP_SYS_PTRACE and mark themselves not dumpable.
set -u
engine_test=$1
if ! setpriv --bounding-set=-sys_ptrace true 2>/dev/null; then
  echo "setpriv cannot drop CAP_SYS_PTRACE here; skipping"; exit 0
fi
out=$(HIXL_TEST_UNDUMPABLE=1 HIXL_LOG_LEVEL=info HIXL_SHM_PROMOTE=0 setpriv --bounding-set=-sys_ptrace \
      timeout 600 "$engine_test" --gtest_filter='*/shm' 2>&1)
rc=$?
echo "$out" | grep -E "refused|PASSED|FAILED|Failure" | head -20
fail=0
[[ $rc -eq 0 ]] || { echo "FAIL: the suite failed (exit $rc)"; echo "$out" | tail -40; fail=1; }
echo "$out" | grep -q "cross-memory attach to rank .* refused" || { echo "FAIL: cross-memory attach was never refused"; fail=1; }
exit $fail
