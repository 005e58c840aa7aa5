#!/usr/bin/env bash
# The hixl_perf smoke test (ctest hixl_perf_smoke): a short run on small sizes
# must complete, verify every batch and write JSON with the expected fields;
# a run whose received data is damaged on purpose must fail its check.
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

echo "== many-to-one, 3 ranks, CSV output"
"$hixlrun" -n 3 --prefix-output --timeout 120 "$perf" --sizes 8,4K,64K --pattern many --reps 2 --batch-ms 1 \
  --no-memcpy --output "$out/smoke.csv"
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: hixl_perf -n 3 --pattern many exited with $rc"; fail=1; }
# header + 2 memory kinds x 2 ops x 3 sizes
lines=$(wc -l < "$out/smoke.csv" 2>/dev/null || echo 0)
[[ $lines -eq 13 ]] || { echo "FAIL: $out/smoke.csv has $lines lines, expected 13"; fail=1; }

echo "== damaged data must be detected"
msg=$("$hixlrun" -n 2 --prefix-output --timeout 120 "$perf" --sizes 4K --ops put --mem sym --reps 1 \
      --batch-ms 1 --no-memcpy --corrupt-for-test 2>&1)
rc=$?
echo "$msg" | tail -5
[[ $rc -eq 1 ]] || { echo "FAIL: a run with damaged data exited with $rc, expected 1"; fail=1; }
echo "$msg" | grep -q "VERIFICATION FAILED" || { echo "FAIL: no VERIFICATION FAILED message"; fail=1; }

if [[ $fail -eq 0 ]]; then echo "hixl_perf smoke: passed"; else echo "hixl_perf smoke: FAILED"; fi
exit $fail
