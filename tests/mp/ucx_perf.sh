#!/usr/bin/env bash
# The bandwidth figures of docs/ucx.md: hixl's put and get of 64 MiB over the
# ucx transport on TCP, against iperf3 (TCP itself) and ucx_perftest (UCX's
# own RMA benchmark, same transport), measured in turns in one run.
#
#   ucx_perf.sh [--netns] BUILD_DIR [ROUNDS (default 3)]
#
# --netns: across two "hosts" instead of loopback: two network namespaces
# joined by a veth pair (tests/mp/netns_lib.sh; needs root), every server
# and rank 0 in one, every client and rank 1 in the other.
#
# Prints each measurement (GB/s = 1e9 bytes/s) and hixl's ratios to the
# references within each round, then the median of each over the rounds.  Needs iperf3 and ucx_perftest (Debian: iperf3,
# ucx-utils).  Not a ctest: timing on a shared machine is noisy.
set -u
netns=0
[[ ${1:-} == --netns ]] && { netns=1; shift; }
build=${1:?usage: ucx_perf.sh [--netns] BUILD_DIR [ROUNDS]}
rounds=${2:-3}
size=$((64 << 20))
for tool in iperf3 ucx_perftest python3 ss; do
  command -v $tool >/dev/null || { echo "$tool is not installed"; exit 2; }
done
hixlrun=$build/tools/hixlrun bw=$build/tests/mp/put_get_bw
[[ -x $hixlrun && -x $bw ]] || { echo "build $build first (hixlrun, put_get_bw)"; exit 2; }

source "$(dirname "$0")/netns_lib.sh"  # its helpers; namespaces only with --netns
out=$(mktemp -d)
server=
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null
  [[ $netns -eq 1 ]] && netns_remove
  rm -rf "$out"
}
trap cleanup EXIT

server_addr=127.0.0.1
if [[ $netns -eq 1 ]]; then
  NETNS_TMP=$out
  netns_make ucxbw || { echo "--netns: $NETNS_WHY"; exit 2; }
  server_addr=${NETNS_ADDR[0]}
fi

# iperf3: one TCP stream, 5 s; the receiver's rate.
iperf() {
  local port; port=$(netns_free_port)
  netns_in 0 iperf3 -s -1 -p "$port" >/dev/null 2>&1 & server=$!
  netns_wait_listen "$port"
  netns_in 1 iperf3 -c "$server_addr" -p "$port" -t 5 -J >"$out/iperf.json" 2>/dev/null
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=  # -1: it has exited unless no test ran
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9)' \
    "$out/iperf.json" 2>/dev/null
}

# ucx_perftest TEST [VAR=VALUE...]: the "overall" bandwidth in GB/s.
perftest() {
  local test=$1 port line i; shift
  port=$(netns_free_port)
  netns_in 0 env UCX_TLS=tcp "$@" timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 & server=$!
  netns_wait_listen "$port"
  line=$(netns_in 1 env UCX_TLS=tcp "$@" timeout 120 ucx_perftest "$server_addr" -p "$port" -t "$test" -s $size -n 20 \
         -w 2 2>/dev/null | grep '^Final')
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=
  # Final: iterations, latency (typical, avg, overall), bandwidth MB/s (avg, overall), msg rate
  awk '{print $7 * 1048576 / 1e9}' <<<"$line"
}

# hixl: put_get_bw's medians.
hixl() {
  if [[ $netns -eq 1 ]]; then
    NETNS_PAIR_ENV=(HIXL_TRANSPORT=ucx UCX_TLS=tcp,self)
    netns_pair "$(netns_free_port)" "$bw" $size 20
    cat "$out/rank0.log" "$out/rank1.log" >"$out/hixl.txt"
  else
    HIXL_TRANSPORT=ucx UCX_TLS=tcp,self timeout 300 "$hixlrun" -n 2 --timeout 250 "$bw" $size 20 >"$out/hixl.txt" 2>&1
  fi
  awk '/^put/ {p=$5} /^get/ {g=$5} END {print p, g}' "$out/hixl.txt"
}

declare -A all
add() {  # NAME VALUE: a failed measurement counts as nan
  local v=${2:-nan}
  all[$1]="${all[$1]:-} $v"
  echo "  $1: $v"
}
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
  # Ratios within the round, where the machine's state is the same for all.
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "nan" && b != "nan" && b > 0) printf "%.2f", a / b; else print "nan"}'; }
  last() { awk '{print $NF}' <<<"${all[$1]}"; }
  add put_vs_iperf3 "$(ratio "$(last hixl_put)" "$(last iperf3)")"
  add get_vs_iperf3 "$(ratio "$(last hixl_get)" "$(last iperf3)")"
  add put_vs_perftest "$(ratio "$(last hixl_put)" "$(last perftest_put_bw)")"
  add get_vs_perftest "$(ratio "$(last hixl_get)" "$(last perftest_get)")"
  add put_vs_perftest_512k "$(ratio "$(last hixl_put)" "$(last perftest_put_bw_512k)")"
  add get_vs_perftest_512k "$(ratio "$(last hixl_get)" "$(last perftest_get_512k)")"
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | grep -v nan | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "medians over $rounds rounds (GB/s, 64 MiB transfers; ratios taken within each round):"
for k in iperf3 perftest_put_bw perftest_get perftest_put_bw_512k perftest_get_512k hixl_put hixl_get \
         put_vs_iperf3 get_vs_iperf3 put_vs_perftest get_vs_perftest put_vs_perftest_512k get_vs_perftest_512k; do
  printf '  %-22s %s\n' "$k" "$(median "${all[$k]}")"
done
