#!/usr/bin/env bash
# kWgmmaTmaNarrow (tiles of up to 64 tokens, two CTAs an SM) and the leaner k-step of the bulk-copy forms
# (docs/perf.md "Two CTAs an SM on narrow tiles", twenty-ninth session): moe_prefill_test, cuda_forward_test,
# memcheck of the five small cases, ncu of both forms' gate/up launch at 2 rows an expert, the bench
# alternated (base = kWgmmaTma160W of the build before, the new kWgmmaTma160W, kWgmmaTmaNarrow) on the four
# routings and on 2-64 rows an expert, then the crossover lines with the backend's pick, inside ~4 minutes.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/final/ = moe_prefill_test,
#   moe_prefill_bench, cuda_forward_test of the new build; bin/base/moe_prefill_bench of the old one;
#   bin/lib/ as h200_env.sh takes it: libcudart, libspdlog, libfmt, libpcre2-8)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
R=$B
timeout 120 "$R"/final/moe_prefill_test > "$OUT"/test.log 2>&1; echo "moe_prefill_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT"/test.log | head -8
for k in wgmma-tma-160w wgmma-tma-narrow; do
  echo "$k normalised errors, lowest and highest:"; grep "\[$k\]" "$OUT"/test.log | awk '{print $NF}' | sort -g | sed -n '1p;$p'
done
timeout 150 "$R"/final/cuda_forward_test > "$OUT"/fwd.log 2>&1; echo "cuda_forward_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT"/fwd.log | head -4
B=$R/final moe_prefill_memcheck 100
for k in wgmma-tma-narrow wgmma-tma-160w; do
  timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    -k regex:prefill_wgmma_tma -s 2 -c 1 "$R"/final/moe_prefill_bench --reps 1 --kernels $k --routing uniform --rows 448 --crossover 0 \
    > "$OUT"/ncu_$k.log 2>&1
  echo "ncu $k rc=$? $(t)"
  grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Block Limit Registers|Registers Per Thread|Warp Cycles Per Issued" "$OUT"/ncu_$k.log
done
b() { timeout 60 "$R"/"$1"/moe_prefill_bench --kernels "$2" --crossover 0 "${@:3}" 2>&1 | grep -E " queue " | awk '{print $2, $(NF-8)}' | tr '\n' ' '; echo; }
v() {
  echo "== $1 $2 run $3"; b "$1" "$2"
  for r in 448 1792 3584 5376 7168 10752 14336; do b "$1" "$2" --routing uniform,random --rows $r; done
}
for i in 1 2; do
  v base wgmma-tma-160w $i; v final wgmma-tma-160w $i; v final wgmma-tma-narrow $i; t
done
for n in 224 28; do
  echo "== crossover, $n experts (prefill = the backend's pick)"
  timeout 100 "$R"/final/moe_prefill_bench --kernels wgmma-tma-160w --routing uniform --crossover-experts "$n" 2>&1 | grep crossover; t
done
