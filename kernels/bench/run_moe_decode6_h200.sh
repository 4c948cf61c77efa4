#!/usr/bin/env bash
# One device call for the decode MoE kernel (docs/perf.md, branch moedec6), under 140 s: the
# full moe_decode_test (the K3-shape case on every kernel at B = 1, 4, 64, one CPU reference
# per case), compute-sanitizer memcheck of every case but the K3 one, moe_decode_bench (the
# weights-on-A and fused forms) and ncu of one fused form (NCU_KERNEL) at B = 1 and 64. Copy
# into the carried folder (bin/, lib/) and run from the checkout root:
#   OUT=dir [MEMCHECK=1] [NCU=1] [KERNELS=list] bash .dev/moedec6/run_moe_decode6_h200.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$D/lib"
chmod +x "$D"/bin/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
# Two GPUs: the tests (GPU 1) beside the bench and ncu (GPU 0). One GPU (an `nvidia-h200`
# call): test, bench, memcheck, ncu in turn.
gpus=$(nvidia-smi -L | wc -l)
tests() {
  timeout 95 stdbuf -oL "$D/bin/moe_decode_test" >"$out/decode_test.log" 2>&1
  echo "moe_decode_test rc=$? $(t)" >>"$out/decode_test.log"
}
memcheck() {
  [ "${MEMCHECK:-0}" = 1 ] || return 0
  timeout $((${1:-130} - ($(date +%s) - T0))) compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" \
    --gtest_filter='-*K3*' >"$out/memcheck_decode.log" 2>&1
  echo "memcheck decode rc=$? $(t)" >>"$out/memcheck_decode.log"
}
bench() {
  timeout 70 stdbuf -oL "$D/bin/moe_decode_bench" --reps 20 --routes "$out/routes.txt" \
    --kernels "${KERNELS:-wa-noprefetch,fused,fused-split,fused-split-pdl,fused-split24,fused-split24-stagger}" \
    >"$out/decode_bench.log" 2>&1
  echo "decode bench rc=$? $(t)" >>"$out/decode_bench.log"
}
profile() {
  [ "${NCU:-1}" = 1 ] || return 0
  for b in 1 64; do
    left=$((125 - ($(date +%s) - T0)))
    [ "$left" -gt 10 ] || break
    timeout "$left" ncu --clock-control none -k regex:decode_fused -c 1 --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section SchedulerStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum \
      "$D/bin/moe_decode_bench" --reps 1 --only $b --kernels "${NCU_KERNEL:-fused-split24}" >"$out/ncu_$b.log" 2>&1
    echo "ncu rc=$? $(t)" >>"$out/ncu_$b.log"
  done
}
if [ "$gpus" -gt 1 ]; then
  # A temporary assignment before a function call is exported to what the function runs.
  { CUDA_VISIBLE_DEVICES=1 tests; CUDA_VISIBLE_DEVICES=1 memcheck 130; } &
  side=$!
  export CUDA_VISIBLE_DEVICES=0
  bench
  profile
  wait "$side"
else
  export CUDA_VISIBLE_DEVICES=0
  tests
  bench
  memcheck 115
  profile
fi
echo "== decode bench"
grep -E "expert MLP|kAuto|graph|rc=" "$out/decode_bench.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g'
echo "== decode test (GPU 1)"
grep -E "^\[  (PASSED|FAILED|  OK) |^\[  FAILED|Failure|rc=" "$out/decode_test.log" | head -30
grep -E "K3" "$out/decode_test.log" | head -40
for f in "$out"/ncu_*.log; do
  [ -e "$f" ] || continue
  echo "== $f"
  grep -sE "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|inst_executed|dram__bytes|Registers Per|Achieved Occupancy|Stall|stall|cycles being stalled|rc=" "$f" | head -30
done
echo "== memcheck"
grep -shE "ERROR SUMMARY|rc=|^\[  (PASSED|FAILED) |^\[  FAILED" "$out"/memcheck_*.log
