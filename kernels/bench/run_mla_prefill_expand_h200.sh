#!/usr/bin/env bash
# One device call for the MLA prefill's up-projection GEMM on wgmma (docs/perf.md "MLA prefill:
# the up-projection GEMM on wgmma"): GPU 0: the differential test (every attention form, both
# expand forms, the GEMM alone against an fp64 product), then the bench (the default attention
# form only, the expand GEMM in both forms alone / as steps 1-2 / in the whole run; the
# old split-KV path skipped); GPU 1 meanwhile: compute-sanitizer memcheck of the ragged K3 batch
# (every attention form, both expand forms) and of the GEMM test (several tiles a CTA).
# Fits a 150 s call. From the checkout root with this folder (bin/, lib/) carried:
#   OUT=dir bash .dev/<branch>/run_mla_prefill_expand_h200.sh [bench args]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mla_prefill_expand_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  CUDA_VISIBLE_DEVICES=1 timeout 115 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_prefill_test" \
    --gtest_filter='MlaPrefill.K3HeadDimsRaggedBatchMatchesCpu:MlaPrefill.ExpandGemmMatchesCpuProduct' >"$out/memcheck.log" 2>&1
  echo "memcheck mla_prefill_test rc=$?" >>"$out/memcheck.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== mla_prefill_test"
timeout 45 stdbuf -oL "$here/bin/mla_prefill_test" >"$out/test.log" 2>&1; echo "mla_prefill_test rc=$?"
grep -E "normalised error|^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rror" "$out/test.log" | head -60
echo "== bench"
MLA_PREFILL_FORMS=${MLA_PREFILL_FORMS:-wgmma-tma-pingpong} MLA_PREFILL_NO_OLD=1 timeout 90 "$here/bin/mla_prefill_bench" "$@" 2>&1 | tee "$out/bench.log"
echo "bench rc=${PIPESTATUS[0]}"
wait "$side"
echo "== memcheck (GPU 1)"; grep -E "^\[  (PASSED|FAILED) |ERROR SUMMARY|rc=" "$out/memcheck.log"; tail -3 "$out/memcheck.log"
date -u
