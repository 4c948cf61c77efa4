#!/usr/bin/env bash
# moewg device run (one call, <= 150 s; docs/perf.md "wgmma main loop"): GPU 0: moe_prefill_test
# (every main loop), moe_prefill_bench (mma.sync, wgmma, wgmma-wideN; queue and static; + crossover),
# the torch anchor. GPU 1 meanwhile: compute-sanitizer memcheck of the small test cases (every
# main loop), then ncu on the kWgmmaWideN launches (uniform, --quick). Nothing is built there.
#   OUT=dir bash .dev/moewg/run.sh      (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moewg_out}; mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
(
  timeout 80 env CUDA_VISIBLE_DEVICES=1 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
    >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
  timeout 45 env CUDA_VISIBLE_DEVICES=1 ncu --clock-control none --kernel-name-base mangled -k regex:prefill_wgmmaILb1 -c 2 --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section Occupancy "$here/bin/moe_prefill_bench" --reps 1 --quick 1 >"$out/ncu.log" 2>&1; echo "ncu rc=$? $(t)" >>"$out/ncu.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
timeout 40 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test (GPU 0)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|prefill MoE|rc=" "$out/test.log" | head -40
timeout 30 "$here/bin/moe_prefill_bench" >"$out/bench.log" 2>&1; echo "bench rc=$? $(t)" >>"$out/bench.log"
echo "== bench (GPU 0)"; cat "$out/bench.log"
PYTHONUNBUFFERED=1 timeout 55 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
echo "== torch (GPU 0)"; tail -12 "$out/torch.log"
wait "$side"
echo "== memcheck (GPU 1)"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid|prefill MoE" "$out/memcheck.log" | head -30
echo "== ncu (GPU 1, wgmma-wideN gate/up then down, uniform)"
grep -E "prefill_wgmma|Duration|Compute \(SM\) Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|One or More Eligible|Stall|rc=" "$out/ncu.log" | head -40
