# Two "hosts" on one machine, for bash scripts to source: two network
# namespaces joined by a veth pair (10.200.0.1/24 and 10.200.0.2/24,
# addresses that exist only inside the namespaces made here).  hixl counts
# processes in different network namespaces as different hosts.
#
#   source tests/mp/netns_lib.sh
#   NETNS_TMP=$(mktemp -d)                  # removed on exit, with the namespaces
#   netns_make TAG || netns_skip "$NETNS_WHY"   # sets NETNS[0..1], NETNS_DEV[0..1], NETNS_ADDR[0..1]
#   netns_delay 50 || ...                  # optional: 50 us more each way (tc netem, or
#                                           # NETNS_DELAY_LINK where the kernel has no netem)
#   ip netns exec "${NETNS[0]}" ...
#   NETNS_PIDS+=($!)                        # killed on exit
#   netns_pair PORT PROGRAM ARGS...          # a two-rank world, one rank in each
#   netns_in 1 COMMAND...                   # COMMAND on "host" 1 (this host before netns_make)
#   netns_wait_listen PORT                  # until something listens on PORT on "host" 0
#   port=$(netns_free_port)
#
# Sourcing it defines functions and the EXIT trap below, and makes nothing:
# a script with a loopback mode may source it either way.
# Needs root and iproute2; netns_make fails (NETNS_WHY says why) where
# namespaces cannot be made, so that callers can skip.

NETNS=() NETNS_DEV=() NETNS_ADDR=(10.200.0.1 10.200.0.2) NETNS_WHY=

# netns_make TAG: the two namespaces and the veth pair, both ends up, each
# namespace's loopback up.  TAG (a few letters) keeps concurrent
# users apart; interface names have at most 15 characters, so only its
# first 4 characters name the veth ends (hx, 4, a pid of up to 7 digits, a/b).
netns_make() {
  local tag=$1 i err
  NETNS=("hixl-$tag-$$-0" "hixl-$tag-$$-1")
  NETNS_DEV=("hx${tag:0:4}$$a" "hx${tag:0:4}$$b")
  if [[ $(id -u) -ne 0 ]]; then
    NETNS_WHY="creating network namespaces needs root"
    return 1
  fi
  if ! command -v ip >/dev/null; then
    NETNS_WHY="the ip command (iproute2) is not installed"
    return 1
  fi
  for i in 0 1; do
    if ! err=$(ip netns add "${NETNS[$i]}" 2>&1); then
      NETNS_WHY="cannot create a network namespace: $err"
      return 1
    fi
  done
  if ! err=$(ip link add "${NETNS_DEV[0]}" type veth peer name "${NETNS_DEV[1]}" 2>&1); then
    NETNS_WHY="cannot create a veth pair: $err"
    return 1
  fi
  for i in 0 1; do
    if ! err=$( (ip link set "${NETNS_DEV[$i]}" netns "${NETNS[$i]}" &&
      ip -n "${NETNS[$i]}" addr add "${NETNS_ADDR[$i]}/24" dev "${NETNS_DEV[$i]}" &&
      ip -n "${NETNS[$i]}" link set "${NETNS_DEV[$i]}" up &&
      ip -n "${NETNS[$i]}" link set lo up) 2>&1); then
      NETNS_WHY="cannot set up namespace ${NETNS[$i]}: $err"
      return 1
    fi
  done
}

# netns_delay US: US microseconds more on each direction of the link, so a
# half round trip grows by US: tc netem on both ends of the veth; where the
# kernel has no netem and NETNS_DELAY_LINK names the delay_link program
# (tests/mp/delay_link.cc), the veth is replaced by two TAP devices of the
# same names and addresses joined by that program.  NETNS_DELAY_HOW says
# which.  0 removes the delay (the TAP link, once made, stays, with none).
NETNS_DELAY_HOW= NETNS_LINK_PID=
netns_delay() {
  local us=$1 i err
  [[ -n $NETNS_LINK_PID ]] && { netns_delay_link "$us"; return; }
  for i in 0 1; do
    ip -n "${NETNS[$i]}" qdisc del dev "${NETNS_DEV[$i]}" root 2>/dev/null
    [[ $us -eq 0 ]] && continue
    if ! err=$(ip netns exec "${NETNS[$i]}" tc qdisc add dev "${NETNS_DEV[$i]}" root netem delay "${us}us" 2>&1); then
      if [[ $i -eq 0 && -n ${NETNS_DELAY_LINK:-} ]]; then
        netns_delay_link "$us"
        return
      fi
      NETNS_WHY="tc netem is not available: $err"
      return 1
    fi
  done
  NETNS_DELAY_HOW="veth pair, tc netem $us us each way"
  [[ $us -eq 0 ]] && NETNS_DELAY_HOW="veth pair, no delay"
}

# netns_delay_link US: the veth replaced by NETNS_DELAY_LINK's two TAP
# devices, US microseconds each way.
netns_delay_link() {
  local us=$1 i err line
  [[ -n $NETNS_LINK_PID ]] && kill "$NETNS_LINK_PID" 2>/dev/null && wait "$NETNS_LINK_PID" 2>/dev/null
  ip -n "${NETNS[0]}" link del "${NETNS_DEV[0]}" 2>/dev/null  # takes its peer with it
  exec {NETNS_LINK_FD}< <(exec "$NETNS_DELAY_LINK" "${NETNS_DEV[0]}" "${NETNS_DEV[1]}" "$us" 2>"${NETNS_TMP:?}/delay_link.log")
  NETNS_LINK_PID=$!
  NETNS_PIDS+=("$NETNS_LINK_PID")
  if ! read -r -t 10 -u "$NETNS_LINK_FD" line || [[ $line != ready ]]; then
    NETNS_WHY="delay_link did not start: $(cat "$NETNS_TMP/delay_link.log" 2>/dev/null)"
    return 1
  fi
  for i in 0 1; do
    if ! err=$( (ip link set "${NETNS_DEV[$i]}" netns "${NETNS[$i]}" &&
      ip -n "${NETNS[$i]}" addr add "${NETNS_ADDR[$i]}/24" dev "${NETNS_DEV[$i]}" &&
      ip -n "${NETNS[$i]}" link set "${NETNS_DEV[$i]}" up) 2>&1); then
      NETNS_WHY="cannot set up the delay link in ${NETNS[$i]}: $err"
      return 1
    fi
  done
  NETNS_DELAY_HOW="TAP devices joined by delay_link (no netem in this kernel), $us us each way"
}

# netns_pair PORT PROGRAM ARGS...: PROGRAM as a world of two ranks, rank I
# in namespace I, started as a launcher would (RANK, WORLD_SIZE,
# MASTER_ADDR the first namespace's address, MASTER_PORT=PORT), with
# HIXL_NET_DEV the rank's end of the link and the NAME=VALUE words of the
# array NETNS_PAIR_ENV set for both, each killed after 300 s; rank I's
# output goes to NETNS_TMP/rankI.log.  Fails if either rank fails.
NETNS_PAIR_ENV=()
netns_pair() {
  local port=$1 r p ok=0 ranks=()
  shift
  for r in 0 1; do
    ip netns exec "${NETNS[$r]}" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR="${NETNS_ADDR[0]}" \
      MASTER_PORT="$port" HIXL_NET_DEV="${NETNS_DEV[$r]}" "${NETNS_PAIR_ENV[@]}" timeout -s KILL 300 "$@" \
      >"${NETNS_TMP:?}/rank$r.log" 2>&1 &
    ranks+=($!)
  done
  for p in "${ranks[@]}"; do wait "$p" || ok=1; done
  return $ok
}

# netns_free_port: a TCP port that is free on this host now.
netns_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# netns_in I COMMAND...: COMMAND in namespace I, or on this host itself
# while no namespaces are made (a script's loopback mode).
netns_in() {
  local i=$1
  shift
  if [[ ${#NETNS[@]} -gt 0 ]]; then ip netns exec "${NETNS[$i]}" "$@"; else "$@"; fi
}

# netns_wait_listen PORT: waits (at most 10 s) until something listens on
# TCP port PORT on "host" 0; fails after that.
netns_wait_listen() {
  local i
  for i in $(seq 200); do
    netns_in 0 ss -Hltn "sport = :$1" | grep -q . && return 0
    sleep 0.05
  done
  return 1
}

# netns_rx_bytes I: bytes received so far on namespace I's end of the veth.
netns_rx_bytes() { ip netns exec "${NETNS[$1]}" cat "/sys/class/net/${NETNS_DEV[$1]}/statistics/rx_bytes"; }

netns_remove() {
  local n
  [[ -n $NETNS_LINK_PID ]] && kill "$NETNS_LINK_PID" 2>/dev/null
  NETNS_LINK_PID=
  for n in "${NETNS[@]}"; do ip netns del "$n" 2>/dev/null; done  # takes the veth pair with it
  [[ ${#NETNS_DEV[@]} -gt 0 ]] && ip link del "${NETNS_DEV[0]}" 2>/dev/null
  NETNS=()
  return 0
}

# netns_skip WHY: says the test is skipped in the words ctest's
# SKIP_REGULAR_EXPRESSION looks for, and exits 0.
netns_skip() {
  echo "SKIP: $*"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
}

# On exit (and on INT/TERM): the processes in NETNS_PIDS killed, the
# namespaces and the directory NETNS_TMP removed (a caller with its own EXIT
# trap calls netns_on_exit from it).
NETNS_PIDS=() NETNS_TMP=
netns_on_exit() {
  local p
  for p in "${NETNS_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  netns_remove
  [[ -n $NETNS_TMP ]] && rm -rf "$NETNS_TMP"
  return 0
}
trap netns_on_exit EXIT
trap 'exit 130' INT TERM
