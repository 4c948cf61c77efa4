#!/usr/bin/env bash
# moe_permute's plan and row gather in one launch up to 8192 pairs (docs/perf.md "The decode step's
# permute in one launch", thirtieth session): moe_kernels_test, moe_decode_test, cuda_forward_test,
# memcheck of the permute and routed-layer cases, then moe_decode_bench of the build before and of this
# one alternated three times (the routed step permute -> experts -> combine from a graph), in ~3 minutes.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/final/ = moe_kernels_test, moe_decode_test,
#   cuda_forward_test, moe_decode_bench of this build; bin/base/moe_decode_bench of the one before; bin/lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
R=$B
for tst in moe_kernels_test moe_decode_test cuda_forward_test; do
  timeout 150 "$R"/final/$tst > "$OUT"/$tst.log 2>&1; echo "$tst rc=$? $(t)"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT"/$tst.log | head -6
done
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$R"/final/moe_kernels_test --gtest_filter='*Permute*:*Routed*:*Combine*' \
  > "$OUT"/memcheck.log 2>&1
echo "memcheck rc=$? $(t)"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT"/memcheck.log | head -4
for i in 1 2 3; do
  for v in base final; do
    echo "== $v run $i"
    timeout 90 "$R"/$v/moe_decode_bench --reps 30 --batches 1,2,4,8,16,32,64,128,256 --kernels wa-pdl-qgmma-wide > "$OUT"/dec_${v}_$i.log 2>&1
    grep -E "permute\+decode\+combine" "$OUT"/dec_${v}_$i.log | grep -E "replay" | awk -F'|' '{printf "%s:%s ", $2, $3}' | sed 's/ permute+decode+combine//g; s/  */ /g'; echo
  done
  t
done
