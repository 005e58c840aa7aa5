#!/usr/bin/env bash
# Tests of the hixlrun launcher.
#
#   bash test_hixlrun.sh path/to/hixlrun
#
# Every test runs under `timeout`, so a hanging launcher fails the test rather
# than the whole run.  Prints "N passed, M failed" and exits non-zero when a
# test failed.

set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 path/to/hixlrun" >&2
  exit 2
fi
HIXLRUN=$1
# The ranks inherit this environment; keep it from interfering.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT HIXL_LAUNCHER HIXL_SECRET HIXL_SECRET_FILE

TMP=$(mktemp -d "${TMPDIR:-/tmp}/hixlrun-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
MARK="hixlrun-test-$$-$RANDOM"  # unique string put into the ranks' command lines
READY="$TMP/ready"  # FIFO on which ranks say they are ready (see run_sig)

passed=0
failed=0
test_ok=1
current=""

check() {  # check DESCRIPTION COMMAND...: run COMMAND, record a failure if it fails
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL [$current]: $what" >&2
    test_ok=0
  fi
}

show() {  # dump the output of the last run, for failure messages
  echo "--- rc=$rc elapsed=${elapsed_ms}ms stdout:" >&2
  cat "$TMP/out" >&2
  echo "--- stderr:" >&2
  cat "$TMP/err" >&2
  echo "---" >&2
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# run ARGS...: runs hixlrun ARGS under a 30 s timeout; sets rc and elapsed_ms,
# output goes to $TMP/out and $TMP/err.
run() {
  local t0
  t0=$(now_ms)
  timeout -k 5 30 "$HIXLRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  elapsed_ms=$(($(now_ms) - t0))
}

# run_sig SIGNAL NREADY ARGS...: like run, but sends SIGNAL to hixlrun once
# NREADY ranks have said they are ready: each writes hixlrun's pid ($PPID) as
# a line to the FIFO named by $READY.  Only hixlrun gets the signal (not, as
# from `timeout`, its whole group, followed by SIGCONT).
run_sig() {
  local sig=$1 nready=$2 t0 tpid pid="" line i
  shift 2
  rm -f "$READY"
  mkfifo "$READY"
  exec 3<>"$READY"  # read-write: no EOF between the ranks' writes
  t0=$(now_ms)
  timeout -k 5 30 "$HIXLRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null &
  tpid=$!
  for ((i = 0; i < nready; i++)); do
    read -r -t 30 -u 3 line || break
    pid=$line
  done
  if [ -n "$pid" ]; then
    kill -s "$sig" "$pid"
  else
    echo "FAIL [$current]: the ranks never said they were ready" >&2
    test_ok=0
  fi
  wait "$tpid"
  rc=$?
  exec 3<&-
  rm -f "$READY"
  elapsed_ms=$(($(now_ms) - t0))
}

expect_rc() { check "exit code $rc, expected $1" test "$rc" -eq "$1"; }
expect_faster() { check "took ${elapsed_ms} ms, expected < $1 ms" test "$elapsed_ms" -lt "$1"; }
expect_out() { check "stdout is not as expected (want: $(printf '%q' "$1"))" test "$(cat "$TMP/out")" = "$1"; }
expect_err_has() { check "stderr lacks '$1'" grep -qF -- "$1" "$TMP/err"; }

# True when a process with this pid exists and is not a zombie.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# No process of this test (marked with $MARK-$1 on its command line, or
# recorded in $TMP/pid.*) may survive hixlrun.
expect_no_leftovers() {
  local left p
  left=$(pgrep -f -- "$MARK-$1")
  check "processes left behind: $left" test -z "$left"
  for f in "$TMP"/pid.*; do
    [ -e "$f" ] || continue
    p=$(cat "$f")
    check "background process $p (from $f) left behind" test -n "$p"
    [ -n "$p" ] && check "background process $p (from $f) left behind" eval "! alive $p"
  done
  rm -f "$TMP"/pid.*
}

run_test() {  # run_test NAME: runs the function test_NAME
  current=$1
  test_ok=1
  rm -f "$TMP"/pid.*
  "test_$1"
  if [ "$test_ok" = 1 ]; then
    passed=$((passed + 1))
    echo "ok   $1"
  else
    failed=$((failed + 1))
    show
    echo "FAIL $1"
  fi
  # Leftovers of a failed test must not break the next one.
  pkill -KILL -f -- "$MARK" 2>/dev/null
  return 0
}

# --- tests -------------------------------------------------------------------

test_env() {
  run -n 3 sh -c 'echo "$RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$MASTER_ADDR/$MASTER_PORT/$HIXL_LAUNCHER"'
  expect_rc 0
  local port
  port=$(head -n1 "$TMP/out" | cut -d/ -f6)
  check "MASTER_PORT '$port' is not a port number" \
    eval '[[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ]'
  check "wrong environment" test "$(sort "$TMP/out")" = "0/3/0/3/127.0.0.1/$port/hixlrun
1/3/1/3/127.0.0.1/$port/hixlrun
2/3/2/3/127.0.0.1/$port/hixlrun"
}

test_secret() {  # a fresh job secret per job, the same in every rank; the user's passed on
  run -n 2 sh -c 'echo "$HIXL_SECRET"'
  expect_rc 0
  local first
  first=$(head -n1 "$TMP/out")
  check "HIXL_SECRET '$first' is not 64 hex digits" eval '[[ "$first" =~ ^[0-9a-f]{64}$ ]]'
  check "the ranks got different secrets" test "$(sort -u "$TMP/out" | wc -l)" = 1
  run -n 1 sh -c 'echo "$HIXL_SECRET"'
  check "two jobs got the same secret" test "$(cat "$TMP/out")" != "$first"
  HIXL_SECRET=mine run -n 1 sh -c 'echo "$HIXL_SECRET"'
  check "the user's HIXL_SECRET was not passed on" test "$(cat "$TMP/out")" = mine
  run -n 1 -x HIXL_SECRET_FILE=/some/file sh -c 'echo "${HIXL_SECRET-unset} $HIXL_SECRET_FILE"'
  check "HIXL_SECRET_FILE did not replace the secret" test "$(cat "$TMP/out")" = "unset /some/file"
}

# Rank 0 gets the store's socket, bound and listening at MASTER_PORT before
# any rank starts (so nobody can take the port in between); no other rank
# has it.  Rank 0, holding it, finds the port taken for anyone else.
test_store_socket() {
  run -n 3 sh -c 'fd=${HIXL_STORE_FD-none}
    case $(readlink "/proc/$$/fd/$fd" 2>/dev/null) in socket:*) kind=socket ;; *) kind=- ;; esac
    bind=
    if [ "$RANK" = 0 ]; then
      if python3 -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", int(sys.argv[1])))" "$MASTER_PORT" 2>/dev/null; then
        bind=" free"; else bind=" taken"; fi
    fi
    echo "$RANK $kind$bind"'
  expect_rc 0
  check "rank 0 did not get the store's socket, or another rank did" test "$(sort "$TMP/out")" = "0 socket taken
1 -
2 -"
  # An address of another host (TEST-NET-3) cannot be listened on: refused
  # at once, naming it, before any rank starts.
  run -n 2 --master-addr 203.0.113.7 sh -c 'echo started'
  expect_rc 1
  expect_err_has "203.0.113.7"
  check "a rank started" test ! -s "$TMP/out"
}

test_env_options() {
  run -n 2 --master-addr localhost --master-port 29123 -x A=1 -x B=x=y --env C= -x A=2 \
    sh -c 'echo "$RANK $MASTER_ADDR $MASTER_PORT $A $B [$C] ${C+set}"'
  expect_rc 0
  check "wrong environment" test "$(sort "$TMP/out")" = "0 localhost 29123 2 x=y [] set
1 localhost 29123 2 x=y [] set"
  run -n 1 -x RANK=5 true
  expect_rc 2
  run -n 1 -x NOEQUALS true
  expect_rc 2
}

test_eight_ranks() {
  run -n 8 sh -c 'echo "$RANK $WORLD_SIZE"'
  expect_rc 0
  check "wrong ranks" test "$(sort -n "$TMP/out")" = "$(for i in 0 1 2 3 4 5 6 7; do echo "$i 8"; done)"
}

test_exit_code() {
  run -n 3 sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; exit 0'
  expect_rc 3
  run -n 2 sh -c 'exit 0'
  expect_rc 0
  run -n 1 false
  expect_rc 1
}

test_early_failure_stops_others() {
  # Rank 2 fails while the others (and a background child of each) sleep.
  run -n 4 sh -c 'sleep 1000 & echo $! > "$0/pid.$RANK"
    if [ "$RANK" = 2 ]; then sleep 0.3; exit 5; fi
    wait' "$TMP" "$MARK-early"
  expect_rc 5
  expect_faster 10000
  expect_err_has "hixlrun: rank 2 (pid "
  expect_err_has ") exited with code 5; stopping the other ranks"
  expect_no_leftovers early
}

# Two ranks fail while hixlrun is not reading (here: stopped), rank 1
# first, then rank 0: hixlrun must blame rank 1, whose SIGCHLD came first,
# not rank 0 because it scans ranks in order.  Rank 1 stops hixlrun, then
# exits 3; rank 0 waits until rank 1 is a zombie, leaves a helper that
# continues hixlrun once rank 0 is a zombie too, and exits 5.
test_first_failure_blamed_in_one_batch() {
  run -n 2 sh -c 'state() { sed -E "s/^[0-9]+ \(.*\) (.).*/\1/" "/proc/$1/stat" 2>/dev/null; }
    launcher=$PPID
    if [ "$RANK" = 1 ]; then echo $$ > "$0/r1"; kill -STOP "$launcher"; exit 3; fi
    while [ ! -s "$0/r1" ]; do sleep 0.01; done
    r1=$(cat "$0/r1")
    while [ "$(state "$r1")" != Z ]; do sleep 0.01; done
    me=$$
    (while [ "$(state "$me")" != Z ]; do sleep 0.01; done; kill -CONT "$launcher") &
    exit 5' "$TMP" "$MARK-batch"
  expect_rc 3
  expect_err_has "rank 1 (pid "
  expect_err_has ") exited with code 3; stopping the other ranks"
  check "rank 0 was blamed" eval "! grep -q 'rank 0 (pid' '$TMP/err'"
}

test_kill_grace() {
  # The surviving rank ignores SIGTERM: it must be killed after the grace.
  run -n 2 --kill-grace 300 sh -c 'if [ "$RANK" = 0 ]; then sleep 0.2; exit 4; fi
    trap "" TERM; while :; do sleep 0.1; done' "$MARK-grace"
  expect_rc 4
  expect_faster 10000
  expect_no_leftovers grace
}

test_signal_death() {
  run -n 2 sh -c 'if [ "$RANK" = 1 ]; then kill -KILL $$; fi; exec sleep 1000' "$MARK-sig"
  expect_rc 137
  expect_faster 10000
  expect_err_has "rank 1 (pid "
  expect_err_has "killed by signal 9"
  expect_no_leftovers sig
  run -n 1 sh -c 'kill -USR1 $$'
  expect_rc $((128 + 10))
}

test_prefix_output() {
  run -n 2 --prefix-output sh -c 'echo "out $RANK"; echo "err $RANK" >&2; printf "tail $RANK"'
  expect_rc 0
  check "wrong stdout" test "$(sort "$TMP/out")" = "[0] out 0
[0] tail 0
[1] out 1
[1] tail 1"
  check "wrong stderr" test "$(sort "$TMP/err")" = "[0] err 0
[1] err 1"
  check "stdout does not end with a newline" test "$(tail -c1 "$TMP/out" | od -An -c | tr -d ' ')" = '\n'
  # Same with the short option, and without the option nothing is prefixed.
  run -n 1 -p echo hi
  expect_out "[0] hi"
  run -n 1 echo hi
  expect_out "hi"
}

test_prefix_no_interleaving() {
  # 8 ranks write many long lines at once, in several writes per line: every
  # output line must be whole and carry the prefix of the rank that wrote it.
  run -n 8 -p sh -c 'i=0; while [ $i -lt 300 ]; do
      printf "rank=%s line=%s " "$RANK" "$i"; printf "%0500d\n" "$RANK"; i=$((i + 1)); done' "$MARK-inter"
  expect_rc 0
  check "expected 2400 lines, got $(wc -l <"$TMP/out")" test "$(wc -l <"$TMP/out")" -eq 2400
  local bad
  bad=$(awk '{ r = substr($1, 2, length($1) - 2) }
    $2 != "rank=" r || length($4) != 500 || $4 !~ ("^0*" r "$") || NF != 4 { n++ }
    END { print n + 0 }' "$TMP/out")
  check "$bad malformed lines" test "$bad" -eq 0
  for r in 0 1 2 3 4 5 6 7; do
    check "rank $r lines out of order or missing" \
      test "$(grep "^\[$r\] " "$TMP/out" | awk '{ sub("line=", "", $3); print $3 }' | tr '\n' ' ')" \
      = "$(seq 0 299 | tr '\n' ' ')"
  done
}

test_args_passthrough() {
  # Each rank writes its line with one write(): the two ranks share hixlrun's
  # stdout, and two writes each could interleave.
  run -n 2 sh -c 'line=$(printf "%s|" "$@"); printf "%s\n" "$line"' x --foo -n 3 "a b" -- --np=7 -p --help
  expect_rc 0
  expect_out "--foo|-n|3|a b|--|--np=7|-p|--help|
--foo|-n|3|a b|--|--np=7|-p|--help|"
  # "--" ends hixlrun's options.
  run -n 1 -- sh -c 'printf "%s\n" "$1"' x -n
  expect_out "-n"
}

test_missing_program() {
  run -n 2 "no-such-program-$MARK" arg
  expect_rc 127
  expect_err_has "hixlrun: cannot execute 'no-such-program-$MARK': No such file or directory"
  run -n 2 "$TMP/no/such/path"
  expect_rc 127
  printf 'data\n' >"$TMP/notexec"
  chmod -x "$TMP/notexec"
  run -n 1 "$TMP/notexec"
  expect_rc 126
  expect_err_has "Permission denied"
}

test_timeout() {
  run --timeout 1 -n 3 sh -c 'sleep 1000 & echo $! > "$0/pid.$RANK"; wait' "$TMP" "$MARK-timeout"
  expect_rc 124
  check "returned after ${elapsed_ms} ms, before the timeout" test "$elapsed_ms" -ge 900
  expect_faster 10000
  expect_err_has "timeout"
  expect_no_leftovers timeout
  # A job that ends in time is not affected.
  run --timeout 20 -n 2 true
  expect_rc 0
}

test_forward_signals() {
  # SIGINT and SIGTERM sent to hixlrun reach the ranks.
  run_sig INT 2 -n 2 sh -c 'trap "exit 9" INT; echo $PPID > "$1"; while :; do sleep 0.1; done' "$MARK-fwd" "$READY"
  expect_rc 9
  expect_faster 10000
  expect_no_leftovers fwd
  run_sig TERM 2 -n 2 sh -c 'trap "exit 8" TERM; echo $PPID > "$1"; while :; do sleep 0.1; done' "$MARK-fwd" "$READY"
  expect_rc 8
  expect_no_leftovers fwd
  # Ranks that ignore the signal are killed after --kill-grace.
  run_sig TERM 2 --kill-grace 300 -n 2 sh -c 'trap "" TERM; echo $PPID > "$1"; while :; do sleep 0.1; done' "$MARK-fwd" "$READY"
  expect_rc 137
  expect_faster 10000
  expect_no_leftovers fwd
}

test_leftover_background() {
  # Processes a successful rank leaves running in its group are stopped.
  run -n 2 sh -c 'sleep 1000 & echo $! > "$0/pid.$RANK"' "$TMP" "$MARK-bg"
  expect_rc 0
  expect_faster 10000
  expect_no_leftovers bg
}

test_usage() {
  run --version
  expect_rc 0
  check "--version prints no version" grep -q "hixlrun" "$TMP/out"
  run --help
  expect_rc 0
  check "--help prints no usage" grep -q "Usage" "$TMP/out"
  run true
  expect_rc 2
  run -n 0 true
  expect_rc 2
  run -n 2
  expect_rc 2
  run -n 2 --no-such-option true
  expect_rc 2
}

for t in env secret store_socket env_options eight_ranks exit_code early_failure_stops_others \
  first_failure_blamed_in_one_batch kill_grace signal_death \
  prefix_output prefix_no_interleaving args_passthrough missing_program timeout forward_signals \
  leftover_background usage; do
  run_test "$t"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
