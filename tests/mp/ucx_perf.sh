#!/usr/bin/env bash
# The loopback figures of docs/ucx.md: hixl's put and get of 64 MiB over the
# ucx transport on TCP, against iperf3 (TCP itself) and ucx_perftest (UCX's
# own RMA benchmark, same transport), measured in turns in one run.
#
#   ucx_perf.sh BUILD_DIR [ROUNDS (default 3)]
#
# Prints each measurement, then the median of each in GB/s (1e9 bytes/s)
# and hixl's ratios.  Needs iperf3 and ucx_perftest (Debian: iperf3,
# ucx-utils).  Not a ctest: timing on a shared machine is noisy.
set -u
build=${1:?usage: ucx_perf.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
size=$((64 << 20))
for tool in iperf3 ucx_perftest python3; do
  command -v $tool >/dev/null || { echo "$tool is not installed"; exit 2; }
done
hixlrun=$build/tools/hixlrun bw=$build/tests/mp/put_get_bw
[[ -x $hixlrun && -x $bw ]] || { echo "build $build first (hixlrun, put_get_bw)"; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
out=$(mktemp -d)
server=
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT

# iperf3: one TCP stream, 5 s; the receiver's rate.
iperf() {
  local port; port=$(free_port)
  iperf3 -s -1 -p "$port" >/dev/null 2>&1 & server=$!
  # The client retries until the server listens (it has no option to wait).
  local i; for i in $(seq 50); do
    iperf3 -c 127.0.0.1 -p "$port" -t 5 -J >"$out/iperf.json" 2>/dev/null && break
    sleep 0.1
  done
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=  # -1: it has exited unless no test ran
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9)' \
    "$out/iperf.json"
}

# ucx_perftest TEST [VAR=VALUE...]: the "overall" bandwidth in GB/s.
perftest() {
  local test=$1 port line i; shift
  port=$(free_port)
  env UCX_TLS=tcp "$@" timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 & server=$!
  for i in $(seq 50); do
    line=$(env UCX_TLS=tcp "$@" timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s $size -n 20 -w 2 2>/dev/null |
           grep '^Final') && break
    sleep 0.1
  done
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=
  # Final: iterations, latency (typical, avg, overall), bandwidth MB/s (avg, overall), msg rate
  awk '{print $7 * 1048576 / 1e9}' <<<"$line"
}

# hixl: put_get_bw's medians.
hixl() {
  HIXL_TRANSPORT=ucx UCX_TLS=tcp,self timeout 300 "$hixlrun" -n 2 --timeout 250 "$bw" $size 20 >"$out/hixl.txt" 2>&1
  awk '/^put/ {p=$5} /^get/ {g=$5} END {print p, g}' "$out/hixl.txt"
}

declare -A all
add() { all[$1]="${all[$1]:-} $2"; echo "  $1: $2 GB/s"; }
for r in $(seq "$rounds"); do
  echo "round $r"
  add iperf3 "$(iperf)"
  add perftest_put_bw "$(perftest ucp_put_bw)"
  add perftest_get "$(perftest ucp_get)"
  add perftest_put_bw_512k "$(perftest ucp_put_bw UCX_TCP_TX_SEG_SIZE=512k UCX_TCP_RX_SEG_SIZE=512k)"
  add perftest_get_512k "$(perftest ucp_get UCX_TCP_TX_SEG_SIZE=512k UCX_TCP_RX_SEG_SIZE=512k)"
  read -r p g <<<"$(hixl)"
  add hixl_put "$p"
  add hixl_get "$g"
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "medians over $rounds rounds (GB/s, 64 MiB transfers):"
for k in iperf3 perftest_put_bw perftest_get perftest_put_bw_512k perftest_get_512k hixl_put hixl_get; do
  printf '  %-22s %s\n' "$k" "$(median "${all[$k]}")"
done
ip=$(median "${all[iperf3]}")
for k in hixl_put hixl_get; do
  printf '  %-22s %.0f%% of iperf3\n' "$k" "$(awk -v a="$(median "${all[$k]}")" -v b="$ip" 'BEGIN {print 100 * a / b}')"
done
