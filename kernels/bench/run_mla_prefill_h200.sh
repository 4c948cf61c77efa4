#!/usr/bin/env bash
# One device call for the tensor-core MLA prefill (docs/perf.md, issue 12): the differential
# test, the bench and the torch SDPA anchors on GPU 0; memcheck of the test and the backend
# forward tests (with and without bf16_mla_prefill) on GPU 1 meanwhile. From the checkout root
# with this folder (bin/, lib/, the .py) carried:
#   OUT=dir bash .dev/mlapre/run_mla_prefill_h200.sh [bench args]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mla_prefill_out}
mkdir -p "$out"
# The golden-fixture tests look under the source path the binaries were built from (linked here).
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-mlapre
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  CUDA_VISIBLE_DEVICES=1 timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_prefill_test" >"$out/memcheck.log" 2>&1
  echo "memcheck mla_prefill_test rc=$?" >>"$out/memcheck.log"
  CUDA_VISIBLE_DEVICES=1 timeout 90 "$here/bin/cuda_forward_test" >"$out/forward.log" 2>&1
  echo "cuda_forward_test rc=$?" >>"$out/forward.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== mla_prefill_test"
timeout 60 "$here/bin/mla_prefill_test" >"$out/test.log" 2>&1; echo "mla_prefill_test rc=$?"
grep -E "normalised error|^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rror" "$out/test.log" | head -20
echo "== bench"
timeout 60 "$here/bin/mla_prefill_bench" "$@" 2>&1 | tee "$out/bench.log"; echo "bench rc=$?"
echo "== torch anchors"
timeout 60 python3 "$here/mla_prefill_torch.py" 2>&1 | tee "$out/torch.log"; echo "torch rc=$?"
wait "$side"
echo "== memcheck (GPU 1)"; tail -4 "$out/memcheck.log"
echo "== cuda_forward_test (GPU 1)"; grep -E "error [0-9]|^\[  (PASSED|FAILED) |^\[  FAILED|rc=" "$out/forward.log" | head -30
