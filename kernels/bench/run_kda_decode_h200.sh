#!/usr/bin/env bash
# One device run for the fused KDA decode step (docs/perf.md): the differential tests, the
# backend forward test, compute-sanitizer (memcheck, racecheck), our graph-replay benchmark and
# fla's fused recurrent step as the anchor. Run from the checkout root with this folder
# (binaries under bin/, libraries under lib/) carried, and the wheels in .whl/:
#   bash .dev/kdadec/run_kda_decode_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_decode_out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
echo "== tests"
timeout 70 "$here/bin/kda_decode_kernels_test" >"$out/test.log" 2>&1; echo "kda_decode_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |Failure|error:" "$out/test.log" | head -20
echo "== bench (ours)"
timeout 30 "$here/bin/kda_decode_bench" 2>&1 | tee "$out/bench.log"
echo "== fla anchor"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 50 python3 "$here/kda_decode_fla.py" 2>&1 | tee "$out/fla.log" | tail -12
echo "== backend forward test"
# The golden fixtures are read from the source dir the binary was built in.
if [ ! -e /work/wt-kdadec/tests/fixtures ]; then mkdir -p /work/wt-kdadec/tests && ln -s "$PWD/tests/fixtures" /work/wt-kdadec/tests/fixtures; fi
timeout 25 "$here/bin/cuda_forward_test" >"$out/forward.log" 2>&1; echo "cuda_forward_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |Failure" "$out/forward.log" | head -10
echo "== compute-sanitizer"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_decode_kernels_test" \
  --gtest_filter='*OtherHead*:*Equals*:*Reject*' >"$out/memcheck.log" 2>&1; echo "memcheck rc=$?"
tail -3 "$out/memcheck.log"
timeout 25 compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/kda_decode_kernels_test" \
  --gtest_filter='*Equals*' >"$out/racecheck.log" 2>&1; echo "racecheck rc=$?"
tail -3 "$out/racecheck.log"
