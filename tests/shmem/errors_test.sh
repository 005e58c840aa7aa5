#!/usr/bin/env bash
# Bad input to the OpenSHMEM front door ends the job (tests/shmem/errors.c):
# a put, a non-blocking put, a get and an atomic on a stack (non-symmetric)
# address of another PE, and a put to a PE outside the world, each make
# hixlrun exit non-zero well before any timeout, with a line on stderr that
# names the address and the target PE; shmem_global_exit(7) on one PE ends
# the job with status 7.
# Usage: errors_test.sh HIXLRUN ERRORS_PROGRAM [NP]
set -u
hixlrun=$1 prog=$2 np=${3:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# No failure may wait for a timeout: HIXL_TIMEOUT_MS is large, hixlrun's small.
export HIXL_TIMEOUT_MS=600000
passed=0 failed=0

# run MODE: runs the job, sets rc, elapsed_ms, out, err
run() {
  local start
  start=$(date +%s%N)
  timeout 120 "$hixlrun" -n "$np" --timeout 60 "$prog" "$1" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  echo "---- $1: hixlrun returned $rc after ${elapsed_ms} ms"
  sed 's/^/  stdout: /' "$tmp/out"
  sed 's/^/  stderr: /' "$tmp/err"
}

verdict() { # NAME OK(0/1) WHY
  if [[ $2 -eq 0 ]]; then
    passed=$((passed + 1))
    echo "PASS: $1"
  else
    failed=$((failed + 1))
    echo "FAIL: $1: $3"
  fi
}

# A bad remote address: non-zero, in time, a stderr line with the address and the PE.
for mode in put-stack put-nbi-stack get-stack amo-stack; do
  run "$mode"
  bad=0 why=""
  if [[ $rc -eq 0 ]]; then bad=1 why="the job succeeded"; fi
  if [[ $rc -eq 124 ]]; then bad=1 why="the job hung until hixlrun's --timeout"; fi
  if ((elapsed_ms > 30000)); then bad=1 why="$why; took ${elapsed_ms} ms"; fi
  addr=$(grep -o '0x[0-9a-fA-F]*' "$tmp/out" | head -1)
  digits=${addr#0x}
  if [[ -z $digits ]]; then
    bad=1 why="$why; the program printed no address (did it start?)"
  elif ! grep -iF "$digits" "$tmp/err" | grep -qE '(PE|pe|rank) 1([^0-9]|$)'; then
    bad=1 why="$why; no stderr line names the address $addr and PE 1"
  fi
  if ! grep -qiE 'not registered|not symmetric|non-symmetric|not remotely accessible|unregistered' "$tmp/err"; then
    bad=1 why="$why; stderr does not say the address is not registered/symmetric"
  fi
  verdict "$mode" $bad "$why"
done

# A PE outside the world: non-zero, in time, the PE named.
run bad-pe
bad=0 why=""
if [[ $rc -eq 0 || $rc -eq 124 ]]; then bad=1 why="hixlrun returned $rc"; fi
if ((elapsed_ms > 30000)); then bad=1 why="$why; took ${elapsed_ms} ms"; fi
if ! grep -qE "(PE|pe|rank) $np([^0-9]|$)" "$tmp/err"; then bad=1 why="$why; stderr does not name PE $np"; fi
verdict bad-pe $bad "$why"

# shmem_global_exit(7) on the last PE while the others wait in a barrier.
run global-exit
bad=0 why=""
if [[ $rc -ne 7 ]]; then bad=1 why="hixlrun returned $rc, want 7"; fi
if ((elapsed_ms > 30000)); then bad=1 why="$why; took ${elapsed_ms} ms"; fi
verdict global-exit $bad "$why"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
