#!/usr/bin/env bash
# kWgmmaTma160W (the packed words riding the token ring; docs/perf.md "The packed words through the
# token ring") against kWgmmaTma160 in the same binary: moe_prefill_test (every loop bit-identical to
# kWgmma, the expert-limit case), cuda_forward_test (kAuto = kWgmmaTma160W), memcheck of the five
# small cases, the bench twice on all four routings with the GPU's clock and power logged, random rows
# alone and after hot, and the crossover lines against the decode kernels, inside ~240 s.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/ = moe_prefill_test, moe_prefill_bench,
#   cuda_forward_test, bin/lib/ as h200_env.sh takes it)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
timeout 100 "$B"/moe_prefill_test > "$OUT"/test.log 2>&1; echo "test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT"/test.log | head -20
for k in wgmma-tma-160 wgmma-tma-160w; do
  echo "$k normalised errors, lowest and highest:"; grep "\[$k\]" "$OUT"/test.log | awk '{print $NF}' | sort -g | sed -n '1p;$p'
done
timeout 90 "$B"/cuda_forward_test > "$OUT"/fwd.log 2>&1; echo "cuda_forward_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT"/fwd.log | head
moe_prefill_memcheck 90
bench() { timeout 60 "$B"/moe_prefill_bench --kernels wgmma-tma-160,wgmma-tma-160w --crossover 0 "$@" 2>&1 | grep -E "queue|static" | awk '{print $2, $3, $4, $(NF-8), $(NF-6)}'; t; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 500 > "$OUT"/smi.log 2>&1 &
smi=$!
for i in 1 2; do echo "== all routings, run $i"; bench; done
for i in 1 2; do echo "== random alone, run $i"; bench --routing random; done
echo "== hot then random"; bench --routing hot,random
kill "$smi" 2>/dev/null
echo "SM clock MHz / power W over the bench (min, median, max):"
awk -F', ' '{gsub(/ MHz/, "", $2); gsub(/ W/, "", $3); print $2, $3}' "$OUT"/smi.log | sort -n | awk '{c[NR] = $1; p[NR] = $2} END {print c[1], c[int(NR / 2) + 1], c[NR]}'
awk -F', ' '{gsub(/ W/, "", $3); print $3}' "$OUT"/smi.log | sort -g | awk '{p[NR] = $1} END {print p[1], p[int(NR / 2) + 1], p[NR]}'
for n in 224 28; do
  echo "== crossover, $n experts"; timeout 90 "$B"/moe_prefill_bench --kernels wgmma-tma-160w --routing uniform --crossover-experts "$n" 2>&1 | grep crossover; t
done
