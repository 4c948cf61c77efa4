#!/usr/bin/env bash
# One device call for the MoE decode and prefill kernels (docs/perf.md, branch moepre2).
# GPU 0: moe_prefill_test, moe_prefill_bench (this build, then old/moe_prefill_bench, an
# earlier build, for an A/B in the same run), moe_decode_bench, cuda_forward_test.
# GPU 1 meanwhile: moe_decode_test and compute-sanitizer memcheck of both tests.
# Copy this file into the carried folder (bin/, lib/, old/) and run from the checkout root:
#   OUT=dir bash .dev/moepre2/run_moe_h200.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
# cuda_forward_test reads its golden fixtures under the source path it was built from.
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$D/lib" /work/wt-moepre2
chmod +x "$D"/bin/* "$D"/old/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
(
  g1() { CUDA_VISIBLE_DEVICES=1 "$@"; }
  g1 timeout 50 stdbuf -oL "$D/bin/moe_decode_test" >"$out/decode_test.log" 2>&1
  echo "moe_decode_test rc=$? $(t)" >>"$out/decode_test.log"
  g1 timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" --gtest_filter='-*K3*:*TwoStreams*' \
    >"$out/memcheck_decode.log" 2>&1
  echo "memcheck decode rc=$? $(t)" >>"$out/memcheck_decode.log"
  g1 timeout 55 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_prefill_test" >"$out/memcheck_prefill.log" 2>&1
  echo "memcheck prefill rc=$? $(t)" >>"$out/memcheck_prefill.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
timeout 40 stdbuf -oL "$D/bin/moe_prefill_test" >"$out/prefill_test.log" 2>&1
echo "moe_prefill_test rc=$? $(t)" >>"$out/prefill_test.log"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|normalised" "$out/prefill_test.log" | head -30
timeout 30 "$D/bin/moe_prefill_bench" >"$out/prefill_bench.log" 2>&1
echo "prefill bench rc=$? $(t)" >>"$out/prefill_bench.log"
if [ -x "$D/old/moe_prefill_bench" ]; then
  timeout 30 "$D/old/moe_prefill_bench" >"$out/prefill_bench_old.log" 2>&1
  echo "prefill bench (old build) rc=$? $(t)" >>"$out/prefill_bench_old.log"
fi
echo "== prefill, this build"; grep -E "prefill |crossover|rc=" "$out/prefill_bench.log"
echo "== prefill, old build"; grep -sE "prefill |rc=" "$out/prefill_bench_old.log"
timeout 45 "$D/bin/moe_decode_bench" --reps 30 >"$out/decode_bench.log" 2>&1
echo "decode bench rc=$? $(t)" >>"$out/decode_bench.log"
echo "== decode bench"; grep -E "kAuto|fused|no L2|strided|graph|rc=" "$out/decode_bench.log"
timeout 25 "$D/bin/cuda_forward_test" >"$out/forward.log" 2>&1
echo "cuda_forward_test rc=$? $(t)" >>"$out/forward.log"
echo "== cuda_forward_test"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|rc=" "$out/forward.log" | head
wait "$side"
echo "== decode test (GPU 1)"
grep -E "fused|auto|^\[  (PASSED|FAILED|  OK|       OK)|FAILED|rc=|Failure" "$out/decode_test.log" |
  grep -v "^decode MoE \(streamed\|staged\|weights\)" | head -50
echo "== memcheck"; grep -hE "ERROR SUMMARY|rc=|PASSED|FAILED" "$out"/memcheck_*.log
