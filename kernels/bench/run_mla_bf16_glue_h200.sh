#!/usr/bin/env bash
# One device call for the bf16 latent cache's writes and prefill gather (docs/perf.md "bf16
# latent cache: writes and the prefill gather (branch mlabf16glue)"), one GPU: the transfer
# kernels test, the latent-write glue tests (cuda_forward_test BackendOps.*), mla_prefill_test
# (every attention form and both expands on fp32 and bf16 pages), the bench
# (mla_prefill_bench --cache-bf16), then compute-sanitizer memcheck of the new cases (the small
# ones first, the K3 ragged batch on bf16 pages last). Fits a 150 s call. From the checkout root with this folder (bin/, bin/lib/) carried:
#   OUT=dir bash .dev/<branch>/run_mla_bf16_glue_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mla_bf16_glue_out}
mkdir -p "$out"
bin=$here/bin
if [ -f "$here/bins.tar.xz" ]; then
  mkdir -p /tmp/mlabf16glue && tar -C /tmp/mlabf16glue -xJf "$here/bins.tar.xz" && bin=/tmp/mlabf16glue/bin
fi
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$bin/lib"
chmod +x "$bin"/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
export CUDA_VISIBLE_DEVICES=0
echo "== transfer_kernels_test"
timeout 20 "$bin/transfer_kernels_test" >"$out/transfer.log" 2>&1; echo "transfer_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure" "$out/transfer.log" | head -20
echo "== cuda_forward_test BackendOps.*"
timeout 20 "$bin/cuda_forward_test" --gtest_filter='BackendOps.*' >"$out/glue.log" 2>&1; echo "BackendOps rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure|first mismatch" "$out/glue.log" | head -20
echo "== mla_prefill_test"
timeout 60 stdbuf -oL "$bin/mla_prefill_test" >"$out/prefill.log" 2>&1; echo "mla_prefill_test rc=$?"
grep -E "bf16 cache|^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure" "$out/prefill.log" | head -60
echo "== bench"
date -u
timeout 40 "$bin/mla_prefill_bench" --cache-bf16 16384 8192 8192 8192 2>&1 | tee "$out/bench.log"
echo "bench rc=${PIPESTATUS[0]}"
echo "== memcheck"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/mla_prefill_test" \
  --gtest_filter='MlaPrefill.Bf16CacheTinyDims*:MlaPrefillNoGpu.*' >"$out/memcheck_prefill.log" 2>&1
echo "memcheck mla_prefill_test rc=$?"
timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/transfer_kernels_test" \
  --gtest_filter='Transfer.Bf16MlaLatentPages:Transfer.EmptyListIsANoOp:TransferPlan.*' >"$out/memcheck_transfer.log" 2>&1
echo "memcheck transfer rc=$?"
timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_forward_test" \
  --gtest_filter='BackendOps.MlaWriteLatentsFp32AndBf16MatchHost:BackendOps.MlaAbsorbVUpAndWrite' >"$out/memcheck_glue.log" 2>&1
echo "memcheck glue rc=$?"
grep -hE "^\[  (PASSED|FAILED) |ERROR SUMMARY" "$out"/memcheck_*.log
# Last (the longest): the K3 ragged batch on bf16 pages, every form, under memcheck.
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/mla_prefill_test" \
  --gtest_filter='MlaPrefill.Bf16CacheK3*' >"$out/memcheck_k3.log" 2>&1
echo "memcheck K3 bf16 rc=$?"
grep -hE "^\[  (PASSED|FAILED) |ERROR SUMMARY" "$out/memcheck_k3.log"
date -u
