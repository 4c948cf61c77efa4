#!/usr/bin/env bash
# What kWgmmaTma160's main loop waits for (twenty-fifth session, docs/perf.md "What holds
# kWgmmaTma160 below the bare loop"), in one call of ~300 s:
#   - moe_prefill_test, cuda_forward_test and memcheck of the five small cases (this build);
#   - the bench with parts of the memory traffic removed (moe_prefill_bench_tma_ablateN, N = the
#     PDS_PREFILL_TMA_ABLATE mask: 1 no words after the first chunk, 2 no token copies, 4 no gate/up
#     stores, 8 no down stores) beside the library's build, uniform and random rows, twice;
#   - the crossover lines against the decode kernels, uniform and random rows, 2-64 an expert;
#   - the torch anchor (moe_prefill_torch.py, all four routings).
#   OUT=dir MASKS="3 4 8 12 15" bash .dev/X/run.sh   (carried with bins.tar.xz: bin/ = moe_prefill_bench,
#   moe_prefill_test, cuda_forward_test, moe_prefill_bench_tma_ablateN for N in MASKS, bin/lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
bench() { timeout 40 "$@" --crossover 0 2>&1 | grep -E "queue|static" | awk '{print $2, $3, $4, $13, $15}'; }
timeout 60 "$B"/moe_prefill_test > "$OUT"/test.log 2>&1; echo "test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT"/test.log | head -20
for pass in 1 2; do
  for m in 0 ${MASKS:-3 4 8 12 15}; do
    exe="$B"/moe_prefill_bench; [ "$m" != 0 ] && exe="$B"/moe_prefill_bench_tma_ablate$m
    echo "== pass $pass ablate $m"; bench "$exe" --kernels wgmma-tma-160 --routing uniform,random
  done
  t
done
echo "== crossover"; timeout 90 "$B"/moe_prefill_bench --kernels wgmma-tma-160 --routing uniform 2>&1 | grep crossover; t
echo "== torch"; timeout 120 python3 kernels/bench/moe_prefill_torch.py --reps 5 2>&1 | tail -12; t
timeout 90 "$B"/cuda_forward_test > "$OUT"/fwd.log 2>&1; echo "cuda_forward_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT"/fwd.log | head
moe_prefill_memcheck 60
