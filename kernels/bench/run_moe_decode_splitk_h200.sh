#!/usr/bin/env bash
# One device call for the decode MoE kernel's split-K form (kWeightsAPdlSplitK) against kWeightsAPdl*
# and kAuto (docs/perf.md, branch moedec10), under 120 s on an `nvidia-h200-x2`:
#   GPU 1: moe_decode_test (all of it), then compute-sanitizer memcheck of moe_decode_test without
#          the K3-shape and two-stream cases (their size; every kernel runs in the others)
#   GPU 0: the previous build's moe_decode_bench (old/) and this build's, side by side
# Copy into the carried folder (bin/, old/, lib/) and run from the checkout root:
#   OUT=dir [KERNELS=list] [OLD_KERNELS=list] bash .dev/moedec10/run_moe_decode_splitk_h200.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$D/lib"
chmod +x "$D"/bin/* "$D"/old/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
tests() {
  timeout 60 stdbuf -oL "$D/bin/moe_decode_test" >"$out/decode_test.log" 2>&1
  echo "moe_decode_test rc=$? $(t)" >>"$out/decode_test.log"
  timeout $((105 - ($(date +%s) - T0))) compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" \
    --gtest_filter='-*K3*:*TwoStreams*' >"$out/memcheck_decode.log" 2>&1
  echo "memcheck decode rc=$? $(t)" >>"$out/memcheck_decode.log"
}
bench() {  # $1: binary, $2: log, $3: kernels
  timeout 45 stdbuf -oL "$1" --reps 20 --kernels "$3" >"$out/$2" 2>&1
  echo "decode bench rc=$? $(t)" >>"$out/$2"
}
{ CUDA_VISIBLE_DEVICES=1 tests; } &
side=$!
export CUDA_VISIBLE_DEVICES=0
bench "$D/old/moe_decode_bench" bench_old.log "${OLD_KERNELS:-wa-pdl,wa-pdl-l2}"
bench "$D/bin/moe_decode_bench" bench_new.log "${KERNELS:-wa-pdl,wa-pdl-l2,wa-pdl-splitk}"
wait "$side"
for f in bench_old bench_new; do
  echo "== $f"
  grep -E "expert MLP|kAuto|graph|rc=" "$out/$f.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g'
done
echo "== decode test (GPU 1)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/decode_test.log" | head -30
grep -E "pdl|error [0-9.e-]*$" "$out/decode_test.log" | grep -E "split-K|auto" | head -40
echo "== memcheck"
grep -shE "ERROR SUMMARY|rc=|^\[  (PASSED|FAILED) |^\[  FAILED" "$out"/memcheck_*.log
