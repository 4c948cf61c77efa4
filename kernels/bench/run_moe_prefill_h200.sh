#!/usr/bin/env bash
# One device call for the prefill MoE grouped GEMM (docs/perf.md, issue 11 prefill half): the
# differential test, the bench (ours + the decode-kernel crossover) and the torch anchor on
# GPU 0; memcheck of the test and the backend forward tests on GPU 1 meanwhile. Run from the
# checkout root with this folder (bin/, lib/) carried:
#   OUT=dir bash .dev/moepre/run_moe_prefill_h200.sh [bench args]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moe_prefill_out}
mkdir -p "$out"
# The golden-fixture tests look under the source path the binaries were built from (linked here).
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-moepre
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  CUDA_VISIBLE_DEVICES=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" >"$out/memcheck.log" 2>&1
  echo "memcheck moe_prefill_test rc=$?" >>"$out/memcheck.log"
  CUDA_VISIBLE_DEVICES=1 timeout 60 "$here/bin/cuda_forward_test" >"$out/forward.log" 2>&1
  echo "cuda_forward_test rc=$?" >>"$out/forward.log"
  CUDA_VISIBLE_DEVICES=1 timeout 80 ncu --clock-control none -k regex:prefill_gemm -c 2 --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section Occupancy "$here/bin/moe_prefill_bench" --reps 1 --quick 1 >"$out/ncu.log" 2>&1
  echo "ncu rc=$?" >>"$out/ncu.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== moe_prefill_test"
timeout 60 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|error|prefill MoE" "$out/test.log" | head -30
echo "== bench"
timeout 60 "$here/bin/moe_prefill_bench" "$@" 2>&1 | tee "$out/bench.log"; echo "bench rc=$?"
echo "== torch anchor"
PYTHONUNBUFFERED=1 timeout 70 python3 "$here/moe_prefill_torch.py" 2>&1 | tee "$out/torch.log"; echo "torch rc=$?"
wait "$side"
echo "== memcheck (GPU 1)"; grep -E "ERROR SUMMARY|rc=|FAILED" "$out/memcheck.log" | head
echo "== cuda_forward_test (GPU 1)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|rc=" "$out/forward.log" | head
echo "== ncu (GPU 1, uniform gate/up then down)"
grep -E "prefill_gemm|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc Active|One or More Eligible|rc=" "$out/ncu.log" | head -40
