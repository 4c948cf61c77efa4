#!/usr/bin/env bash
# moepf6 device run (one call on one H200, <= 150 s; docs/perf.md "Token multicast across a
# 2-CTA cluster"): moe_prefill_test (every main loop, every case), moe_prefill_bench --kernels
# $KERN three times (kWgmma, kWgmmaTma and the multicast form side by side, run after run),
# the multicast form again with PDS_PREFILL_MC_SOLO=1 (a diagnostic: no multicast) twice,
# compute-sanitizer memcheck of the small test cases (every main loop), the torch anchor.
# Nothing is built there.
#   OUT=dir [KERN=wgmma,wgmma-tma,wgmma-tma-mc] bash .dev/moepf6/run.sh   (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moepf6_out}; mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-moepf6
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
kern=${KERN:-wgmma,wgmma-tma,wgmma-tma-mc}
export CUDA_VISIBLE_DEVICES=0
timeout 40 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/test.log" | head -30
grep -E "prefill MoE.*(wgmma\]|tma-mc)" "$out/test.log" | head -40
for i in 1 2 3; do
  PDS_PREFILL_MC_VERBOSE=1 timeout 20 "$here/bin/moe_prefill_bench" --kernels "$kern" --crossover 0 >>"$out/bench.log" 2>&1; echo "bench run $i rc=$? $(t)" >>"$out/bench.log"
done
echo "== bench"; cat "$out/bench.log"
# Diagnostic: the same clusters, pairs and cross-CTA barriers, each CTA copying whole chunks (no multicast).
for i in 1 2; do
  PDS_PREFILL_MC_SOLO=1 PDS_PREFILL_MC_VERBOSE=1 timeout 20 "$here/bin/moe_prefill_bench" --kernels wgmma,wgmma-tma-mc --crossover 0 >>"$out/bench_solo.log" 2>&1
  echo "bench solo run $i rc=$? $(t)" >>"$out/bench_solo.log"
done
echo "== bench, PDS_PREFILL_MC_SOLO=1"; grep -E "^prefill|rc=|clusters" "$out/bench_solo.log"
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
  >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
echo "== memcheck"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid" "$out/memcheck.log" | head -20
PYTHONUNBUFFERED=1 timeout 25 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
echo "== torch"; tail -6 "$out/torch.log"
