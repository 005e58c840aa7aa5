#!/usr/bin/env bash
# The OSU Micro-Benchmarks' OpenSHMEM programs (unchanged sources) built with
# hixl-oshcc and run with hixlrun on short settings: each must exit 0 and
# print all its result rows.  No timing thresholds, no data checks (OSU's
# programs check nothing).
#
#   osu_smoke.sh BUILD_DIR [OSU_DIR]
#
# BUILD_DIR: hixl's build folder (tools/hixl-oshcc, tools/hixlrun).
# OSU_DIR: the OSU sources (c/openshmem, c/util; default $OSU_OSHM_DIR or
# /work/shared/peers/osu-oshm); when they are missing the test prints
# "skipped" and exits 0.  OSU_SMOKE_OPENMPI=1 runs the same smoke with Open
# MPI's oshcc and oshrun instead (to check the script itself).
# OSU_SMOKE_CFLAGS: more compiler flags (word-split), e.g. -fsanitize=address,undefined
# with HIXL_CC=clang-14 for a sanitizer build of libhixl (hixl-oshcc reads HIXL_CC).
# OSU_SMOKE_TIMEOUT: seconds per run (default 120).
# OSU_SMOKE_SKIP: runs to leave out, space-separated, each PROG (every run of
# it) or PROG:heap / PROG:global, e.g. "put_overlap get:global" (for slow
# transports: over UCX on TCP put_overlap alone takes over two minutes).
# The transport is hixl's choice, or what HIXL_TRANSPORT and friends say.
#
# Runs, 2 PEs: put get put_nb get_nb put_overlap put_mr put_mr_nb get_mr_nb
# atomics, each with heap and with global (symmetric static data); their
# sizes and iterations are fixed in OSU's sources (1 B .. 1 MiB or 4 MiB).
# 2 and 4 PEs: barrier broadcast collect fcollect reduce with -i 5 -m 65536
# (4 B .. 64 KiB, 5 timed iterations after OSU's fixed warm-up).
set -u
read -r -a cflags <<<"${OSU_SMOKE_CFLAGS:-}"
build=${1:?usage: osu_smoke.sh BUILD_DIR [OSU_DIR]}
osu=${2:-${OSU_OSHM_DIR:-/work/shared/peers/osu-oshm}}
per_run_timeout=${OSU_SMOKE_TIMEOUT:-120}

if [[ ! -f $osu/c/util/osu_util.c ]]; then
  echo "no OSU OpenSHMEM sources in $osu: skipped"
  exit 0
fi
if [[ ${OSU_SMOKE_OPENMPI:-0} == 1 ]]; then
  cc=oshcc
  root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  launch() { local n=$1; shift; timeout -k 10 "$per_run_timeout" oshrun "${root[@]}" --oversubscribe -np "$n" \
               --mca spml ucx --mca osc ^rdma "$@"; }
  if ! command -v oshcc >/dev/null || ! command -v oshrun >/dev/null; then
    echo "FAIL: no oshcc/oshrun"
    exit 1
  fi
else
  cc=$build/tools/hixl-oshcc
  hixlrun=$build/tools/hixlrun
  launch() { local n=$1; shift; "$hixlrun" -n "$n" --timeout "$per_run_timeout" "$@"; }
  for f in "$cc" "$hixlrun"; do
    [[ -x $f ]] || { echo "FAIL: $f is missing (build hixl's OpenSHMEM front door and hixlrun)"; exit 1; }
  done
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/osu_smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT

src=$osu/c
progs=(put get put_nb get_nb put_overlap put_mr put_mr_nb get_mr_nb atomics barrier broadcast collect fcollect reduce)
declare -A built
fail=0 nrun=0 nfail=0
summary=()

echo "== building ${#progs[@]} OSU programs with $cc ${cflags[*]}"
for p in "${progs[@]}"; do
  # build.sh's command line, one program at a time.
  if out=$("$cc" -O2 "${cflags[@]}" -I"$src/util" -o "$work/osu_oshm_$p" "$src/openshmem/osu_oshm_$p.c" "$src/util/osu_util.c" \
             "$src/util/osu_util_pgas.c" -lm 2>&1); then
    built[$p]=1
  else
    echo "FAIL: osu_oshm_$p does not build:"
    echo "$out" | tail -20 | sed 's/^/    /'
    summary+=("FAIL  build  osu_oshm_$p")
    fail=1 nfail=$((nfail + 1))
  fi
done

# A result row: "SIZE VALUE...", "shmem_OP VALUE VALUE" (atomics) or "VALUE" (barrier).
row_re='^ *(shmem_[a-z_]+ +)?[0-9]+(\.[0-9]+)?( +[0-9]+(\.[0-9]+)?)* *$'

# run NP EXPECTED_ROWS PROG ARGS...
run() {
  local n=$1 want=$2 p=$3
  shift 3
  [[ -n ${built[$p]:-} ]] || return
  local skip
  for skip in ${OSU_SMOKE_SKIP:-}; do
    if [[ $skip == "$p" || $skip == "$p:${1:-}" ]]; then
      summary+=("skip  osu_oshm_$p np=$n $* (OSU_SMOKE_SKIP)")
      return
    fi
  done
  local t0 rc rows out secs
  t0=$(date +%s.%N)
  out=$(launch "$n" "$work/osu_oshm_$p" "$@" 2>&1)
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
  rows=$(grep -cE "$row_re" <<<"$out")
  nrun=$((nrun + 1))
  local what="osu_oshm_$p np=$n $*"
  if [[ $rc -eq 0 && $rows -ge 1 && $rows -ge $want ]]; then
    summary+=("ok    $what: $rows rows, ${secs} s")
  else
    local why="exit $rc"
    [[ $rc -eq 124 ]] && why="timed out after ${per_run_timeout} s (exit 124)"
    [[ $rc -gt 128 && $rc -ne 124 ]] && why="exit $rc (signal $((rc - 128)))"
    summary+=("FAIL  $what: $why, $rows of $want rows, ${secs} s")
    echo "FAIL: $what: $why, $rows of $want result rows; its output:"
    tail -40 <<<"$out" | sed 's/^/    /'
    fail=1 nfail=$((nfail + 1))
  fi
}

echo "== point-to-point, message rate and atomics, 2 PEs, heap and global"
for mem in heap global; do
  for p in put get put_nb get_nb put_overlap; do run 2 21 "$p" "$mem"; done
  for p in put_mr put_mr_nb get_mr_nb; do run 2 23 "$p" "$mem"; done
  run 2 16 atomics "$mem"
done
echo "== collectives, 2 and 4 PEs, -i 5 -m 65536"
for n in 2 4; do
  run "$n" 1 barrier -i 5
  for p in broadcast collect fcollect reduce; do run "$n" 15 "$p" -i 5 -m 65536; done
done

echo "== summary ($nrun runs, $nfail failed)"
printf '%s\n' "${summary[@]}"
exit $fail
