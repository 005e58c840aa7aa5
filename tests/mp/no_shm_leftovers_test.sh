#!/usr/bin/env bash
# Ranks that exit without hixl_finalize leave no shared-memory files, no
# processes and no listening sockets behind.  (A rank may see another leave
# first: rank 0 exiting takes the store with it, and a rank still waiting
# for its last barrier's reply then fails with HIXL_ERR_PEER_FAILED, exit 1.
# That is the correct outcome of leaving without finalize; what is checked
# here is what stays behind.)
set -u
hixlrun=$1 lifecycle=$2
timeout 60 "$hixlrun" -n 4 "$lifecycle" no-finalize
rc=$?
fail=0
[[ $rc -eq 0 || $rc -eq 1 ]] || { echo "FAIL: ranks exited with $rc"; fail=1; }
ls /dev/shm | grep -qi hixl && { echo "FAIL: hixl files in /dev/shm"; fail=1; }
# No rank process remains, so none of its sockets or mappings can (other
# tests may run beside this one, so machine-wide counts would not be ours).
pgrep -f "$lifecycle no-finalize" >/dev/null && { echo "FAIL: ranks still running"; fail=1; }
if [[ $fail -eq 0 ]]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
