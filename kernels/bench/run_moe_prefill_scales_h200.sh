#!/usr/bin/env bash
# kWgmmaTma160W with each tile's scale bytes pulled into L2 (docs/perf.md "The tile's scales pulled into
# L2; ...", twenty-eighth session) against the build before: moe_prefill_test, cuda_forward_test,
# memcheck of the five small cases, the bench alternated three times on the four routings and on the
# narrow rows (--rows 448: 2 rows an expert; 3584: 16), then the crossover lines, inside ~90 s.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/final/ = moe_prefill_test,
#   moe_prefill_bench, cuda_forward_test of the new build; bin/base/moe_prefill_bench of the old one;
#   bin/lib/ as h200_env.sh takes it: libcudart, libspdlog, libfmt, libpcre2-8)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
R=$B
timeout 100 "$R"/final/moe_prefill_test > "$OUT"/test.log 2>&1; echo "moe_prefill_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT"/test.log | head -8
echo "wgmma-tma-160w normalised errors, lowest and highest:"; grep "\[wgmma-tma-160w\]" "$OUT"/test.log | awk '{print $NF}' | sort -g | sed -n '1p;$p'
timeout 120 "$R"/final/cuda_forward_test > "$OUT"/fwd.log 2>&1; echo "cuda_forward_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT"/fwd.log | head
B=$R/final moe_prefill_memcheck 90
b() { timeout 60 "$R"/"$1"/moe_prefill_bench --kernels wgmma-tma-160w --crossover 0 "${@:2}" 2>&1 | grep -E "queue|static" | awk '{print $2, $4, $(NF-8), $(NF-6)}' | tr '\n' ' '; echo; }
for i in 1 2 3; do
  for v in base final; do echo "== $v run $i"; b $v; b $v --routing uniform,zipf --rows 448; b $v --routing uniform,zipf --rows 3584; done
  t
done
for n in 224 28; do
  echo "== crossover final, $n experts"; timeout 90 "$R"/final/moe_prefill_bench --kernels wgmma-tma-160w --routing uniform --crossover-experts "$n" 2>&1 | grep crossover; t
done
