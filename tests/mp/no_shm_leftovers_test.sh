#!/usr/bin/env bash
# Ranks that exit without hixl_finalize leave no shared-memory files, no
# processes and no listening sockets behind.
set -u
hixlrun=$1 lifecycle=$2
before=$(ls /dev/shm | wc -l)
timeout 60 "$hixlrun" -n 4 "$lifecycle" no-finalize
rc=$?
after=$(ls /dev/shm | wc -l)
fail=0
[[ $rc -eq 0 ]] || { echo "FAIL: ranks exited with $rc"; fail=1; }
[[ $after -le $before ]] || { echo "FAIL: /dev/shm has $((after - before)) new entries: $(ls /dev/shm)"; fail=1; }
ls /dev/shm | grep -qi hixl && { echo "FAIL: hixl files in /dev/shm"; fail=1; }
pgrep -f "$lifecycle no-finalize" >/dev/null && { echo "FAIL: ranks still running"; fail=1; }
if [[ $fail -eq 0 ]]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
