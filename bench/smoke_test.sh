#!/usr/bin/env bash
# The hixl_perf smoke test (ctest hixl_perf_smoke): short runs on small sizes
# (put, get, put_signal, fetch_add; over shm, and over UCX on TCP loopback
# when it is built in) must complete, verify every batch and write JSON with
# the expected fields; a run whose received data is damaged on purpose must
# fail its check.
# No timing thresholds.
#   smoke_test.sh HIXLRUN HIXL_PERF OUT_DIR CMAKE CHECK_SCRIPT
set -u
hixlrun=$1 perf=$2 out=$3 cmake=$4 check=$5
mkdir -p "$out"
rm -f "$out/smoke.json" "$out/smoke.csv"
fail=0

echo "== hixl_perf, 2 ranks, 8 B .. 64 KiB"
"$hixlrun" -n 2 --prefix-output --timeout 120 "$perf" --max 65536 --reps 3 --batch-ms 1 --output "$out/smoke.json"
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: hixl_perf exited with $rc"; fail=1; }
if [[ -f $out/smoke.json ]]; then
  "$cmake" -DFILE="$out/smoke.json" -P "$check" || { echo "FAIL: $out/smoke.json lacks expected content"; fail=1; }
else
  echo "FAIL: hixl_perf wrote no $out/smoke.json"; fail=1
fi

echo "== the same over UCX (TCP loopback), 2 ranks, 8 B, 4 KiB, 64 KiB"
rm -f "$out/smoke_ucx.json"
HIXL_TRANSPORT=ucx UCX_TLS=tcp,self "$hixlrun" -n 2 --prefix-output --timeout 120 "$perf" --sizes 8,4K,64K \
  --reps 2 --batch-ms 1 --output "$out/smoke_ucx.json"
rc=$?
if [[ $rc -eq 77 ]]; then
  echo "(no ucx transport in this build: skipped)"
elif [[ $rc -ne 0 ]]; then
  echo "FAIL: hixl_perf over ucx exited with $rc"; fail=1
else
  "$cmake" -DFILE="$out/smoke_ucx.json" -DNSIZES=3 -DTRANSPORT=ucx -P "$check" ||
    { echo "FAIL: $out/smoke_ucx.json lacks expected content"; fail=1; }
fi

echo "== many-to-one, 3 ranks, CSV output"
"$hixlrun" -n 3 --prefix-output --timeout 120 "$perf" --sizes 8,4K,64K --pattern many --reps 2 --batch-ms 1 \
  --no-memcpy --output "$out/smoke.csv"
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: hixl_perf -n 3 --pattern many exited with $rc"; fail=1; }
# header + 2 memory kinds x (2 ops x 3 sizes + fetch_add by 2 workers); no
# put_signal (a one-to-one ping-pong)
lines=$(wc -l < "$out/smoke.csv" 2>/dev/null || echo 0)
[[ $lines -eq 15 ]] || { echo "FAIL: $out/smoke.csv has $lines lines, expected 15"; fail=1; }
grep -q '^hixl,[^,]*,3,many_to_one,sym,fetch_add,8,' "$out/smoke.csv" ||
  { echo "FAIL: $out/smoke.csv has no fetch_add line"; fail=1; }

echo "== two copy threads, 8 MiB (split in parts), memory written before and after registration"
for touch in "" --touch-after-register; do
  "$hixlrun" -n 2 --prefix-output --timeout 120 "$perf" --sizes 8M --ops put,get --measure bw --reps 1 \
    --batch-ms 1 --copy-threads 2 $touch --output "$out/smoke_split.json"
  rc=$?
  [[ $rc -eq 0 ]] || { echo "FAIL: hixl_perf --copy-threads 2 $touch exited with $rc"; fail=1; }
  grep -q '"copy_threads_env": "2"' "$out/smoke_split.json" 2>/dev/null ||
    { echo "FAIL: $out/smoke_split.json does not say HIXL_COPY_THREADS=2"; fail=1; }
done
# A world of one (no launcher): its hixl_init must refuse the value, naming it.
msg=$(env -u RANK -u WORLD_SIZE -u MASTER_PORT timeout 60 "$perf" --sizes 8 --reps 1 --copy-threads 0 2>&1)
rc=$?
[[ $rc -eq 1 ]] && echo "$msg" | grep -q "HIXL_COPY_THREADS='0'" ||
  { echo "FAIL: --copy-threads 0 (exit $rc) did not fail naming HIXL_COPY_THREADS='0': $msg"; fail=1; }

for op in put put_signal fetch_add; do
  echo "== damaged data must be detected: $op"
  msg=$("$hixlrun" -n 2 --prefix-output --timeout 120 "$perf" --sizes 4K --ops $op --mem sym --reps 1 \
        --batch-ms 1 --no-memcpy --corrupt-for-test 2>&1)
  rc=$?
  echo "$msg" | tail -3
  [[ $rc -eq 1 ]] || { echo "FAIL: a $op run with damaged data exited with $rc, expected 1"; fail=1; }
  echo "$msg" | grep -q "VERIFICATION FAILED" || { echo "FAIL: no VERIFICATION FAILED message for $op"; fail=1; }
done

if [[ $fail -eq 0 ]]; then echo "hixl_perf smoke: passed"; else echo "hixl_perf smoke: FAILED"; fi
exit $fail
