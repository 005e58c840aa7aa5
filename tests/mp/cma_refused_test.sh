#!/usr/bin/env bash
# When the kernel refuses cross-memory attach (as containers often do), the
# relay takes over transparently.  We make the kernel refuse for real: the
# ranks run without CAP_SYS_PTRACE and mark themselves not dumpable.
set -u
hixlrun=$1 conformance=$2
if ! setpriv --bounding-set=-sys_ptrace true 2>/dev/null; then
  echo "setpriv cannot drop CAP_SYS_PTRACE here; skipping"; exit 0
fi
out=$(HIXL_TEST_UNDUMPABLE=1 HIXL_LOG_LEVEL=info HIXL_TRANSPORT=shm HIXL_SHM_CMA=1 HIXL_SHM_PROMOTE=0 \
      setpriv --bounding-set=-sys_ptrace "$hixlrun" -n 2 --prefix-output --timeout 600 "$conformance" 2>&1)
rc=$?
echo "$out" | grep -E "refused|PASSED|FAILED|Failure" | head -20
fail=0
[[ $rc -eq 0 ]] || { echo "FAIL: the suite failed (exit $rc)"; echo "$out" | tail -40; fail=1; }
echo "$out" | grep -q "cross-memory attach to rank .* refused" || { echo "FAIL: cross-memory attach was never refused, so the fallback was not exercised"; fail=1; }
if [[ $fail -eq 0 ]]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
