#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair
# (netns_lib.sh), one rank in each, MASTER_ADDR on the veth.  hixl
# counts processes in different network namespaces as different hosts, so
# the automatic transport choice must give the peer to ucx.
#
#   twohost_test.sh TWOHOST_BINARY
#
# Cases:
#   auto          UCX picks its transports itself (the namespaces share one
#                 kernel, so UCX may well use its shared-memory transports)
#   auto-tcp      UCX_TLS=tcp and HIXL_NET_DEV=<the veth>: the data crosses
#                 the veth (its byte counter says so); the control plane's
#                 address must be on it too
#   auto-tcp-any-device
#                 UCX_TLS=tcp, no HIXL_NET_DEV: UCX must not be misled by
#                 the loopback device each namespace has
#   shm-refused   HIXL_TRANSPORT=shm: init fails, naming the other host
# Needs root (ip netns add); skips, exit 0, where namespaces cannot be made.
# Everything made here is removed on exit.
set -u
bin=$1
source "$(dirname "$0")/netns_lib.sh"

NETNS_TMP=$(mktemp -d)
out=$NETNS_TMP

netns_make 2h || netns_skip "$NETNS_WHY"
ns=("${NETNS[@]}") dev=("${NETNS_DEV[@]}") addr=("${NETNS_ADDR[@]}")

passed=0 failed=0
# run_case NAME PORT ARG -- VAR=VALUE...: both ranks, each in its namespace.
run_case() {
  local name=$1 port=$2 arg=$3
  shift 4
  local start rc0 rc1 i
  start=$(date +%s%N)
  NETNS_PIDS=()
  for i in 0 1; do
    local vars=() v
    for v in "$@"; do vars+=("${v//@veth/${dev[$i]}}"); done  # @veth: this rank's end of the pair
    ip netns exec "${ns[$i]}" env RANK=$i WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=${addr[0]} MASTER_PORT=$port \
      HIXL_TIMEOUT_MS=60000 "${vars[@]}" timeout -s KILL 300 "$bin" $arg >"$out/$name.$i.log" 2>&1 &
    NETNS_PIDS+=($!)
  done
  wait "${NETNS_PIDS[0]}"; rc0=$?
  wait "${NETNS_PIDS[1]}"; rc1=$?
  NETNS_PIDS=()
  echo "--- $name: rank 0 exit $rc0, rank 1 exit $rc1, $(( ($(date +%s%N) - start) / 1000000 )) ms"
  sed 's/^/    /' "$out/$name.0.log" "$out/$name.1.log" | grep -v "^    $" | tail -40
  if [[ $rc0 -eq 0 && $rc1 -eq 0 ]]; then
    passed=$((passed + 1))
  else
    echo "FAIL: $name"
    failed=$((failed + 1))
  fi
}

rx_bytes() { netns_rx_bytes 0; }

run_case auto 29500 "" -- HIXL_TRANSPORT=auto
before=$(rx_bytes)
run_case auto-tcp 29501 "" -- HIXL_TRANSPORT=auto UCX_TLS=tcp HIXL_NET_DEV=@veth
# Rank 1 put 256 MiB (and more) into rank 0 and rank 0 got as much from it.
crossed=$(( $(rx_bytes) - before ))
if (( crossed >= 512 * 1024 * 1024 )); then
  echo "--- auto-tcp: $crossed bytes came in over ${dev[0]}"
else
  echo "FAIL: auto-tcp: only $crossed bytes came in over ${dev[0]}: the data did not cross the veth"
  passed=$((passed - 1)) failed=$((failed + 1))
fi
run_case auto-tcp-any-device 29502 "" -- HIXL_TRANSPORT=auto UCX_TLS=tcp
run_case shm-refused 29503 refused -- HIXL_TRANSPORT=shm
echo "$passed passed, $failed failed, 0 skipped"
[[ $failed -eq 0 ]]
