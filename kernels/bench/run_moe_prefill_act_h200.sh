#!/usr/bin/env bash
# The prefill MoE with the cheaper gate/up activation pass (twenty-fifth session, docs/perf.md "What
# holds kWgmmaTma160 below the bare loop"): moe_prefill_test, the bench against the previous build
# alternating three times (all four routings, kWgmmaTma160 and kWgmma), cuda_forward_test, memcheck
# of the five small cases, inside ~200 s.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/ = moe_prefill_test, moe_prefill_bench,
#   moe_prefill_bench_old (the previous build), cuda_forward_test, bin/lib/ as h200_env.sh takes it)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
timeout 60 "$B"/moe_prefill_test > "$OUT"/test.log 2>&1; echo "test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT"/test.log | head -20
echo "kWgmmaTma160 normalised errors, lowest and highest:"; grep "wgmma-tma-160\]" "$OUT"/test.log | awk '{print $NF}' | sort -g | sed -n '1p;$p'
for b in old new old new old new; do
  exe="$B"/moe_prefill_bench; [ "$b" = old ] && exe="$B"/moe_prefill_bench_old
  echo "== $b"; timeout 40 "$exe" --kernels wgmma,wgmma-tma-160 --crossover 0 2>&1 | grep -E "queue|static" | awk '{print $2, $3, $4, $13, $15}'; t
done
timeout 90 "$B"/cuda_forward_test > "$OUT"/fwd.log 2>&1; echo "cuda_forward_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT"/fwd.log | head
moe_prefill_memcheck 60
