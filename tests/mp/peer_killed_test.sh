#!/usr/bin/env bash
# A peer that stops answering (SIGSTOP) and then is killed (SIGKILL) mid-run:
# the survivor's next put + fence to it (over the transport the environment
# selects; ctest sets HIXL_TRANSPORT=ucx) must fail within HIXL_TIMEOUT_MS,
# naming it, and nothing may hang (see peer_killed.cc).  The ranks are
# started here with torchrun-style variables rather than by hixlrun, which
# would stop the survivor as soon as a rank dies.
#
#   peer_killed_test.sh PEER_KILLED_BINARY
set -u
bin=$1
: "${HIXL_TIMEOUT_MS:=5000}"
export HIXL_TIMEOUT_MS

# A free port for rank 0's store (the kernel picks it; a race with another
# process taking it in between is possible but harmless: init then fails).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) \
  || port=$((20000 + $$ % 20000))

out=$(mktemp -d)
pids=()
# Each rank runs under `timeout`; its pid there is the child of that pid.
stop_rank() { pkill -KILL -P "$1" 2>/dev/null; kill -KILL "$1" 2>/dev/null; }
cleanup() {
  for p in "${pids[@]}"; do stop_rank "$p"; done
  rm -rf "$out"
}
trap cleanup EXIT

start=$(date +%s%N)
for r in 0 1; do
  # The bound on each rank: far above HIXL_TIMEOUT_MS, far below ctest's.
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout -s KILL 120 "$bin" >"$out/rank$r.log" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; rc0=$?
pkill -KILL -P "${pids[1]}" 2>/dev/null  # rank 1 waits to be killed; if rank 0 failed first, do it here
wait "${pids[1]}" 2>/dev/null; rc1=$?
pids=()
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))

echo "--- rank 0 (exit $rc0)"; cat "$out/rank0.log"
echo "--- rank 1 (exit $rc1)"; cat "$out/rank1.log"
echo "--- both ranks done after ${elapsed_ms} ms (HIXL_TIMEOUT_MS=$HIXL_TIMEOUT_MS)"
fail=0
[[ $rc1 -eq 137 ]] || { echo "FAIL: rank 1 should have died by SIGKILL (137), exit $rc1"; fail=1; }
[[ $rc0 -eq 0 ]] || { echo "FAIL: rank 0 exit $rc0"; fail=1; }
grep -q "all checks passed" "$out/rank0.log" || { echo "FAIL: rank 0 did not pass its checks"; fail=1; }
if [[ $fail -eq 0 ]]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
