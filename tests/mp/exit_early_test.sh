#!/usr/bin/env bash
# A rank that exits early with an error makes hixlrun stop the others and
# return that rank's code, well within the timeout, leaving no process behind.
set -u
hixlrun=$1 lifecycle=$2
start=$(date +%s%N)
HIXL_TIMEOUT_MS=600000 timeout 60 "$hixlrun" -n 4 "$lifecycle" exit-early
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "hixlrun returned $rc after ${elapsed_ms} ms"
fail=0
[[ $rc -eq 3 ]] || { echo "FAIL: expected exit code 3, got $rc"; fail=1; }
(( elapsed_ms < 30000 )) || { echo "FAIL: took ${elapsed_ms} ms (HIXL_TIMEOUT_MS was 600000)"; fail=1; }
if pgrep -f "$lifecycle exit-early" >/dev/null; then
  echo "FAIL: ranks still running"; pkill -9 -f "$lifecycle exit-early"; fail=1
fi
if [[ $fail -eq 0 ]]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
