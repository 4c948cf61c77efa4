#!/usr/bin/env bash
# One device call for the split-KV MLA decode (docs/perf.md, issue 12): the differential test
# and the bench (ours + the old kernel) then the torch anchor on GPU 0; memcheck of the test
# and the backend forward tests (graphs over the new plan) on GPU 1 meanwhile; the TP tests on
# both at the end. Run from the checkout root with this folder (bin/, lib/) carried:
#   OUT=dir bash .dev/mladec/run_mla_decode_h200.sh [bench args]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mla_decode_out}
mkdir -p "$out"
# The golden-fixture tests look under the source path the binaries were built from (linked here).
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-mladec
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  CUDA_VISIBLE_DEVICES=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" >"$out/memcheck.log" 2>&1
  echo "memcheck mla_decode_test rc=$?" >>"$out/memcheck.log"
  CUDA_VISIBLE_DEVICES=1 timeout 60 "$here/bin/cuda_forward_test" >"$out/forward.log" 2>&1
  echo "cuda_forward_test rc=$?" >>"$out/forward.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== mla_decode_test"
timeout 40 "$here/bin/mla_decode_test" >"$out/test.log" 2>&1; echo "mla_decode_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|error" "$out/test.log" | head -20
echo "== bench"
timeout 80 "$here/bin/mla_decode_bench" "$@" 2>&1 | tee "$out/bench.log"; echo "bench rc=$?"
echo "== torch anchor"
timeout 50 python3 "$here/mla_decode_torch.py" 2>&1 | tee "$out/torch.log"; echo "torch rc=$?"
wait "$side"
echo "== memcheck (GPU 1)"; tail -3 "$out/memcheck.log"
echo "== cuda_forward_test (GPU 1)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|rc=" "$out/forward.log" | head
if [ -x "$here/bin/cuda_tp_test" ]; then
  CUDA_VISIBLE_DEVICES=0,1 timeout 40 "$here/bin/cuda_tp_test" >"$out/tp.log" 2>&1; echo "cuda_tp_test rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/tp.log" | head
fi
