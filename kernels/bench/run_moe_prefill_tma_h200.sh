#!/usr/bin/env bash
# moewg3 device run (one call, <= 150 s; docs/perf.md "Bulk tensor copies and four warpgroups"):
# GPU 0: moe_prefill_test (every main loop), moe_prefill_bench (MODE=final: every wgmma loop and
# mma.sync, + the torch anchors; else wgmma, wgmma-tma, wgmma-tma4). GPU 1 meanwhile:
# compute-sanitizer memcheck of the small test cases (every main loop), a second bench sample,
# then ncu on the uniform --quick launches in the time left (early: wgmma-tma4; final: wgmma and
# wgmma-tma). Nothing is built there.
#   OUT=dir MODE=final bash .dev/moewg3/run.sh   (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moewg3_out}; mkdir -p "$out"
mode=${MODE:-early}
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
kern=wgmma,wgmma-tma,wgmma-tma4
ncu_k=wgmma-tma4 ncu_n=2
[ "$mode" = final ] && kern=mma.sync,wgmma,wgmma-wN,wgmma-tma,wgmma-tma4 ncu_k=wgmma,wgmma-tma ncu_n=4
# One GPU only (the single-GPU kind): the "GPU 1" work runs after the rest, on GPU 0.
ngpu=$(nvidia-smi -L | wc -l); side_gpu=1; [ "$ngpu" -lt 2 ] && side_gpu=0
side_work() {
  timeout 75 env CUDA_VISIBLE_DEVICES=$side_gpu compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
    >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
  timeout 25 env CUDA_VISIBLE_DEVICES=$side_gpu "$here/bin/moe_prefill_bench" --kernels wgmma,wgmma-tma,wgmma-tma4 >"$out/bench_gpu1.log" 2>&1
  echo "bench gpu1 rc=$? $(t)" >>"$out/bench_gpu1.log"
  left=$(( 135 - ($(date +%s) - T0) ))
  if [ "$left" -gt 12 ]; then
    timeout "$left" env CUDA_VISIBLE_DEVICES=$side_gpu ncu --clock-control none --kernel-name-base mangled -k regex:prefill_wgmma -c "$ncu_n" --section SpeedOfLight --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section LaunchStats "$here/bin/moe_prefill_bench" --reps 1 --quick 1 --kernels "$ncu_k" >"$out/ncu.log" 2>&1
    echo "ncu rc=$? $(t)" >>"$out/ncu.log"
  else echo "ncu skipped: $left s left" >"$out/ncu.log"; fi
}
if [ "$side_gpu" = 1 ]; then side_work & side=$!; fi
export CUDA_VISIBLE_DEVICES=0
timeout 50 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test (GPU 0)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|bit-identical|rc=" "$out/test.log" | head -30
grep -E "prefill MoE" "$out/test.log" | awk '{print $NF, $0}' | sort -g | tail -3
timeout 35 "$here/bin/moe_prefill_bench" --kernels "$kern" >"$out/bench.log" 2>&1; echo "bench rc=$? $(t)" >>"$out/bench.log"
echo "== bench (GPU 0)"; cat "$out/bench.log"
if [ "$mode" = final ]; then
  PYTHONUNBUFFERED=1 timeout 40 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
  echo "== torch (GPU 0)"; tail -10 "$out/torch.log"
fi
if [ "$side_gpu" = 1 ]; then wait "$side"; else side_work; fi
echo "(side work on GPU $side_gpu of $ngpu)"
echo "== memcheck (GPU 1)"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid" "$out/memcheck.log" | head -20
echo "== bench (GPU 1)"; grep -E "^prefill|rc=" "$out/bench_gpu1.log"
echo "== ncu (GPU 1, uniform, gate/up then down per loop)"
grep -E "prefill_wgmma|Duration|Tensor is|Shared is|Compute \(SM\) Throughput|DRAM Throughput|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|One or More Eligible|Stall|rc=|skipped" "$out/ncu.log" | head -30
