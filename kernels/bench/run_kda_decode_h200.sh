#!/usr/bin/env bash
# One device run for the fused KDA decode step (docs/perf.md): the differential tests and our
# graph-replay benchmark (every plan, old and push) plus fla's fused recurrent step as the
# anchor on GPU 0, compute-sanitizer (memcheck on the small-shape tests, racecheck on the push
# plan) on GPU 1 at the same time. Run from the checkout root with this folder (binaries under
# bin/, libraries under lib/) carried, and the wheels in .whl/:
#   bash .dev/kdadec2/run_kda_decode_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_decode_out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
test_bin="$here/bin/kda_decode_kernels_test"
(
  timeout 90 env CUDA_VISIBLE_DEVICES=1 compute-sanitizer --tool memcheck --error-exitcode 9 "$test_bin" \
    --gtest_filter='*PushPlanSmall*:*OtherHead*:*Equals*:*Reject*' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?" >>"$out/memcheck.log"
  timeout 45 env CUDA_VISIBLE_DEVICES=1 compute-sanitizer --tool racecheck --error-exitcode 9 "$test_bin" \
    --gtest_filter='*PushPlanSmall*' >"$out/racecheck.log" 2>&1
  echo "racecheck rc=$?" >>"$out/racecheck.log"
) &
sanitizers=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests"
timeout 50 "$test_bin" >"$out/test.log" 2>&1; echo "kda_decode_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure|error:" "$out/test.log" | head -20
echo "== bench (ours)"
timeout 35 "$here/bin/kda_decode_bench" >"$out/bench.log" 2>&1; echo "bench rc=$?"
echo "== fla anchor"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 55 python3 "$here/kda_decode_fla.py" >"$out/fla.log" 2>&1; echo "fla rc=$?"
tail -12 "$out/fla.log"
wait "$sanitizers"
echo "== compute-sanitizer"
tail -4 "$out/memcheck.log"
tail -4 "$out/racecheck.log"
echo "== bench"
cat "$out/bench.log"
