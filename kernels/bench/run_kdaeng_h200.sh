#!/usr/bin/env bash
# One device run (nvidia-h200, <= 200 s), branch kdaeng: cuda_forward_test whole (with the new
# Bf16KdaPrefillMixedBatchesNearCpu) and kda_chunk_pipeline_test, memcheck of the new forward
# case (tiny-k3, the model that takes the chunked kernel) beside them, then alone on the GPU:
# kda_chunk_bench --engine (the backend's KDA prefill call at the K3 prefill rank's 8K step).
# Copy to .dev/kdaeng/ with bin/ (cuda_forward_test, kda_chunk_pipeline_test, kda_chunk_bench, stripped)
# and lib/ (.dev/lib); from the checkout root, that folder carried: OUT=dir bash .dev/kdaeng/run_kdaeng_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kdaeng_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdaeng
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
{
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/cuda_forward_test" --gtest_filter='*Bf16KdaPrefill*/0'
  echo "memcheck forward Bf16KdaPrefill/0 rc=$?"
} >"$out/memcheck.log" 2>&1 &
mc=$!
timeout 90 "$here/bin/cuda_forward_test" >"$out/forward_test.log" 2>&1; echo "cuda_forward_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|KDA prefill" "$out/forward_test.log" | head -20
timeout 40 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/pipeline_test.log" | head
wait "$mc"
grep -E "ERROR SUMMARY|rc=" "$out/memcheck.log"
echo "== bench (alone)"
timeout 40 "$here/bin/kda_chunk_bench" --engine 16 2>&1 | tee "$out/engine.log"
echo "bench rc=${PIPESTATUS[0]}"
date -u
