#!/usr/bin/env bash
# The bulk-copy forms with `live` hoisted out of the main loop and no CTA barrier after a down tile
# (twenty-fourth session, docs/perf.md "Where kWgmmaTma160's stalls are"): moe_prefill_test, the
# bench against the previous build alternating (all four routings), cuda_forward_test, memcheck of
# the five small cases, inside ~185 s.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/ = moe_prefill_test, moe_prefill_bench,
#   moe_prefill_bench_old (the previous build), cuda_forward_test, bin/lib/ as h200_env.sh takes it)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
s0=$(date +%s)
left() { echo $(( 185 - ($(date +%s) - s0) )); }
timeout 45 "$B"/moe_prefill_test > "$OUT"/test.log 2>&1; echo "test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT"/test.log | head -20
for b in old new old new; do
  exe="$B"/moe_prefill_bench; [ "$b" = old ] && exe="$B"/moe_prefill_bench_old
  echo "== $b"; timeout 30 "$exe" --kernels wgmma,wgmma-tma,wgmma-tma-160 --crossover 0 2>&1 | grep -E "queue|static" | awk '{print $2, $3, $4, $13, $15}'; t
done
timeout "$(( $(left) > 60 ? 50 : 20 ))" "$B"/cuda_forward_test > "$OUT"/fwd.log 2>&1; echo "cuda_forward_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT"/fwd.log | head
lim=$(left); [ "$lim" -lt 10 ] && lim=10
moe_prefill_memcheck "$lim"
