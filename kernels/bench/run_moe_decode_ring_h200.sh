#!/usr/bin/env bash
# moedec14's device call (nvidia-h200, one GPU, < 200 s): moe_decode_test (all), moe_decode_bench
# with kAuto's forms and the per-warp ring forms in one run (B = 1, 4, 16, 32, 64), ncu of the
# weights-on-A kernels' stall mix (WarpStateStats, SchedulerStats and the raw per-reason stall
# ratios) for kAuto's forms and the ring forms at B = 1 and 64, memcheck of the small cases.
# Copy into a carried folder (bin/ = this build, lib/) and run from the checkout root:
#   source kernels/bench/h200_env.sh BIN/lib /work/wt-moedec14; BIN=dir OUT=dir bash run_moe_decode_ring_h200.sh
# BENCH_KERNELS / NCU_SPECS (B:form:regex suffix, space-separated) override the timed forms and the
# profiled kernels; moedec14's second call: BENCH_KERNELS=wa-pdl-l2,wa-pdl-f32,wa-pdl-ring,
# wa-pdl-ring-l2,wa-pdl-ring1 NCU_SPECS="1:wa-pdl-ring:wr 64:wa-pdl-ring:wr 16:wa-pdl-ring:wr 16:wa-pdl-f32:wa".
set -uo pipefail
D=${BIN:-$(cd "$(dirname "$0")" && pwd)/bin}
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
chmod +x "$D"/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
left() { echo $((${LIMIT:-190} - ($(date +%s) - T0))); }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
timeout 55 stdbuf -oL "$D/moe_decode_test" >"$out/decode_test.log" 2>&1
echo "moe_decode_test rc=$? $(t)" | tee -a "$out/decode_test.log"
timeout 45 stdbuf -oL "$D/moe_decode_bench" --reps 20 --batches 1,4,16,32,64 \
  --kernels "${BENCH_KERNELS:-wa-pdl-l2,wa-pdl-f32,wa-pdl-ring,wa-pdl-ring-l2,wa-pdl-ring1,wa-pdl-ring1-l2}" >"$out/bench.log" 2>&1
echo "bench rc=$? $(t)" | tee -a "$out/bench.log"
S=""
for r in long_scoreboard short_scoreboard wait barrier math_pipe_throttle mio_throttle lg_throttle not_selected dispatch_stall \
  no_instruction branch_resolving membar sleeping tex_throttle drain imc_miss selected; do
  S="$S,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
M="gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_active.avg,sm__cycles_active.max,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.avg.per_cycle_active,launch__grid_size,launch__block_size,launch__registers_per_thread,smsp__warps_active.avg.per_cycle_active$S"
{
  for spec in ${NCU_SPECS:-"1:wa-pdl-l2:wa" "64:wa-pdl-f32:wa" "1:wa-pdl-ring-l2:wr" "64:wa-pdl-ring:wr" "64:wa-pdl-ring1:wr"}; do
    IFS=: read -r b kern re <<<"$spec"
    [ "$(left)" -gt 45 ] || { echo "skipped $spec (time)"; continue; }
    echo "== ncu $kern B=$b"
    timeout 30 ncu --clock-control none -k regex:decode_gemm_"$re" -c 2 --section WarpStateStats --section SchedulerStats --metrics "$M" \
      "$D/moe_decode_bench" --reps 1 --only "$b" --kernels "$kern" 2>&1 | grep -vE "^\| B=|^\|---|^Decode|^\(packed|^$|^\| case"
  done
} >"$out/ncu.log" 2>&1
echo "ncu done $(t)" | tee -a "$out/ncu.log"
lm=$(($(left) - 2))
[ "$lm" -gt 10 ] || lm=10
timeout "$lm" compute-sanitizer --tool memcheck --error-exitcode 9 "$D/moe_decode_test" \
  --gtest_filter='*SmallBatch*:*Skewed*:*Replays*:*ScalesAbove*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$? $(t)" | tee -a "$out/memcheck.log"
grep -E "decode expert MLP|rc=" "$out/bench.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g' | grep -E "ring|kAuto|rc=" | head -60
grep -E "PASSED|FAILED|rc=" "$out/decode_test.log" "$out/memcheck.log" | tail -8
