#!/usr/bin/env bash
# One device call for the decode MoE kernel's 9-operation bit layout and the staggered
# 16-warp split form (docs/perf.md, branch moedq), under 145 s on an `nvidia-h200-x2`:
#   GPU 1: moe_decode_test (all of it), compute-sanitizer memcheck of moe_decode_test without
#          the K3-shape case, moe_prefill_test (the prefill kernels read the same layout)
#   GPU 0: the previous build's moe_decode_bench (old/) and this build's, side by side, then
#          ncu of this build's kFusedSplit at B = 64 (NCU=1) for its instruction count
# Copy into the carried folder (bin/, old/, lib/) and run from the checkout root:
#   OUT=dir [NCU=1] [KERNELS=list] [OLD_KERNELS=list] bash .dev/moedq/run_moe_decode_q_h200.sh
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
  timeout 80 stdbuf -oL "$D/bin/moe_decode_test" >"$out/decode_test.log" 2>&1
  echo "moe_decode_test rc=$? $(t)" >>"$out/decode_test.log"
  timeout $((135 - ($(date +%s) - T0))) compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" \
    --gtest_filter='-*K3*' >"$out/memcheck_decode.log" 2>&1
  echo "memcheck decode rc=$? $(t)" >>"$out/memcheck_decode.log"
  [ -x "$D/bin/moe_prefill_test" ] || return 0
  timeout $((140 - ($(date +%s) - T0))) stdbuf -oL "$D/bin/moe_prefill_test" >"$out/prefill_test.log" 2>&1
  echo "moe_prefill_test rc=$? $(t)" >>"$out/prefill_test.log"
}
bench() {  # $1: binary, $2: log, $3: kernels
  timeout 60 stdbuf -oL "$1" --reps 20 --kernels "$3" >"$out/$2" 2>&1
  echo "decode bench rc=$? $(t)" >>"$out/$2"
}
{ CUDA_VISIBLE_DEVICES=1 tests; } &
side=$!
export CUDA_VISIBLE_DEVICES=0
bench "$D/old/moe_decode_bench" bench_old.log "${OLD_KERNELS:-wa-noprefetch,fused-split}"
bench "$D/bin/moe_decode_bench" bench_new.log "${KERNELS:-wa-noprefetch,fused-split,fused-split-stagger}"
if [ "${NCU:-1}" = 1 ] && [ $((125 - ($(date +%s) - T0))) -gt 15 ]; then
  timeout $((125 - ($(date +%s) - T0))) ncu --clock-control none -k regex:decode_fused -c 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum \
    "$D/bin/moe_decode_bench" --reps 1 --only 64 --kernels fused-split >"$out/ncu_64.log" 2>&1
  echo "ncu rc=$? $(t)" >>"$out/ncu_64.log"
fi
wait "$side"
for f in bench_old bench_new; do
  echo "== $f"
  grep -E "expert MLP|kAuto|graph|rc=" "$out/$f.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g'
done
echo "== decode test (GPU 1)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/decode_test.log" | head -30
grep -E "K3|error" "$out/decode_test.log" | head -40
echo "== prefill test"
grep -sE "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/prefill_test.log" | head -20
echo "== ncu"
grep -sE "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|inst_executed|dram__bytes|rc=" "$out/ncu_64.log" | head -20
echo "== memcheck"
grep -shE "ERROR SUMMARY|rc=|^\[  (PASSED|FAILED) |^\[  FAILED" "$out"/memcheck_*.log
