#!/usr/bin/env bash
# moepf2 device run (one call, <= 150 s; docs/perf.md "Producer warpgroup with a packed-weight
# ring"): GPU 0: moe_prefill_test (every main loop), moe_prefill_bench --kernels
# wgmma,wgmma-prod, the torch anchors. GPU 1 meanwhile: compute-sanitizer memcheck of the small
# test cases (every main loop), a second bench sample of the same two loops, then ncu on the
# producer loop's uniform --quick launches in the time left. Nothing is built there.
#   OUT=dir bash .dev/moepf2/run.sh   (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moepf2_out}; mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
kern=wgmma,wgmma-prod
ngpu=$(nvidia-smi -L | wc -l); side_gpu=1; [ "$ngpu" -lt 2 ] && side_gpu=0
side_work() {
  timeout 70 env CUDA_VISIBLE_DEVICES=$side_gpu compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
    >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
  timeout 25 env CUDA_VISIBLE_DEVICES=$side_gpu "$here/bin/moe_prefill_bench" --kernels "$kern" >"$out/bench_gpu1.log" 2>&1
  echo "bench gpu1 rc=$? $(t)" >>"$out/bench_gpu1.log"
  left=$(( 125 - ($(date +%s) - T0) ))
  if [ "$left" -gt 20 ]; then
    timeout "$left" env CUDA_VISIBLE_DEVICES=$side_gpu ncu --clock-control none --kernel-name-base mangled -k regex:prefill_producer -c 2 --section SpeedOfLight \
      --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
      "$here/bin/moe_prefill_bench" --reps 1 --quick 1 --kernels wgmma-prod >"$out/ncu.log" 2>&1
    echo "ncu rc=$? $(t)" >>"$out/ncu.log"
  else echo "ncu skipped: $left s left" >"$out/ncu.log"; fi
}
if [ "$side_gpu" = 1 ]; then side_work & side=$!; fi
export CUDA_VISIBLE_DEVICES=0
timeout 45 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test (GPU 0)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/test.log" | head -30
grep -E "prefill MoE.*wgmma-producer" "$out/test.log" | head -40
timeout 30 "$here/bin/moe_prefill_bench" --kernels "$kern" >"$out/bench.log" 2>&1; echo "bench rc=$? $(t)" >>"$out/bench.log"
echo "== bench (GPU 0)"; cat "$out/bench.log"
PYTHONUNBUFFERED=1 timeout 30 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
echo "== torch (GPU 0)"; tail -10 "$out/torch.log"
if [ "$side_gpu" = 1 ]; then wait "$side"; else side_work; fi
echo "(side work on GPU $side_gpu of $ngpu)"
echo "== memcheck (GPU $side_gpu)"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid" "$out/memcheck.log" | head -20
echo "== bench (GPU $side_gpu)"; grep -E "^prefill|rc=" "$out/bench_gpu1.log"
echo "== ncu (GPU $side_gpu, uniform, gate/up then down)"
grep -E "prefill_producer|Duration|Compute \(SM\) Throughput|DRAM Throughput|Shared|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|One or More Eligible|Stall|rc=|skipped" "$out/ncu.log" | head -40
