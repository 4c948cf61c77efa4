#!/usr/bin/env bash
# One device call for the wgmma MLA prefill attention (docs/perf.md "MLA prefill on wgmma"):
# GPU 0: the differential test (mma.sync 128/64-row and wgmma variants), the bench (all
# variants, wgmma vs mma.sync output diff; MLA_PREFILL_FORMS picks forms); GPU 1 meanwhile:
# compute-sanitizer memcheck of the ragged K3 case (every variant), then the torch SDPA anchors.
# Fits a 140 s call. From the checkout root with this folder (bin/, lib/, the .py) carried:
#   OUT=dir bash .dev/<branch>/run_mla_prefill_wgmma_h200.sh [bench args]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mla_prefill_wgmma_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  CUDA_VISIBLE_DEVICES=1 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_prefill_test" \
    --gtest_filter='MlaPrefill.K3HeadDimsRaggedBatchMatchesCpu' >"$out/memcheck.log" 2>&1
  echo "memcheck mla_prefill_test rc=$?" >>"$out/memcheck.log"
  CUDA_VISIBLE_DEVICES=1 timeout 50 python3 "$here/mla_prefill_torch.py" >"$out/torch.log" 2>&1
  echo "torch rc=$?" >>"$out/torch.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== mla_prefill_test"
timeout 30 stdbuf -oL "$here/bin/mla_prefill_test" >"$out/test.log" 2>&1; echo "mla_prefill_test rc=$?"
grep -E "normalised error|^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rror" "$out/test.log" | head -40
echo "== bench"
timeout 75 "$here/bin/mla_prefill_bench" "$@" 2>&1 | tee "$out/bench.log"; echo "bench rc=$?"
wait "$side"
echo "== torch anchors (GPU 1, after memcheck)"; cat "$out/torch.log"
echo "== memcheck (GPU 1)"; tail -5 "$out/memcheck.log"
