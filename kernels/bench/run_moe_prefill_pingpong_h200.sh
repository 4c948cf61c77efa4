#!/usr/bin/env bash
# moepf7 device run (one call on one H200, <= 150 s; docs/perf.md "Pingpong consumer
# warpgroups"): moe_prefill_test (every main loop, every case), compute-sanitizer memcheck of
# the small test cases (every main loop, kWgmmaPingpong among them), moe_prefill_bench --kernels
# $KERN three times (kWgmma, kWgmmaTma and the pingpong form side by side, run after run), then
# kWgmma and the pingpong form with PDS_PREFILL_PP_FREE=1 (a diagnostic: no turns) twice.
# Nothing is built there.
#   OUT=dir [KERN=wgmma,wgmma-tma,wgmma-pingpong] bash .dev/moepf7/run.sh   (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moepf7_out}; mkdir -p "$out"
tar -C "$here" -xJf "$here/bins.tar.xz" 2>/dev/null || true
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/bin/lib" /work/wt-moepf7
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
kern=${KERN:-wgmma,wgmma-tma,wgmma-pingpong}
export CUDA_VISIBLE_DEVICES=0
timeout 40 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/test.log" | head -30
grep -E "prefill MoE.*(wgmma\]|pingpong)" "$out/test.log" | head -40
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
  >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
echo "== memcheck"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid" "$out/memcheck.log" | head -20
for i in 1 2 3; do
  timeout 20 "$here/bin/moe_prefill_bench" --kernels "$kern" --crossover 0 >>"$out/bench.log" 2>&1; echo "bench run $i rc=$? $(t)" >>"$out/bench.log"
done
echo "== bench"; cat "$out/bench.log"
# Diagnostic: the same warpgroup tiles and rings without the turns (two independent warpgroups).
for i in 1 2; do
  PDS_PREFILL_PP_FREE=1 timeout 20 "$here/bin/moe_prefill_bench" --kernels wgmma,wgmma-pingpong --crossover 0 >>"$out/bench_free.log" 2>&1
  echo "bench free run $i rc=$? $(t)" >>"$out/bench_free.log"
done
echo "== bench, PDS_PREFILL_PP_FREE=1"; grep -E "^prefill|rc=" "$out/bench_free.log"
