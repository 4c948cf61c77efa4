#!/usr/bin/env bash
# The E4M3 QGMMA decode forms' device call (nvidia-h200, one GPU, < 280 s): moe_decode_test (all:
# both E4M3 forms and kAuto on kFp8 weights in every differential case, the replay test),
# moe_decode_bench with kAuto's bf16 forms beside kWeightsAPdlQgmma and kWeightsAPdlQgmmaWide
# (B = 1 to 256), ncu at B = 64 (time, instructions, issue rate, every stall reason; the wide gate/up
# kernel's instructions by opcode), memcheck of the small cases, racecheck of the skewed case.
# Copy into a carried folder (bin/ = this build, lib/) and run from the checkout root:
#   source kernels/bench/h200_env.sh BIN/lib /work/main; BIN=dir OUT=dir bash run_moe_decode_qgmma_h200.sh
# BENCH_KERNELS, BATCHES and NCU_SPECS (B:form:regex suffix) override the defaults.
set -uo pipefail
D=${BIN:-$(cd "$(dirname "$0")" && pwd)/bin}
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
chmod +x "$D"/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
left() { echo $((${LIMIT:-280} - ($(date +%s) - T0))); }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
timeout 110 stdbuf -oL "$D/moe_decode_test" >"$out/decode_test.log" 2>&1
echo "moe_decode_test rc=$? $(t)" | tee -a "$out/decode_test.log"
timeout 50 stdbuf -oL "$D/moe_decode_bench" --reps 20 --batches "${BATCHES:-1,4,16,32,64,128,256}" \
  --kernels "${BENCH_KERNELS:-wa-pdl-l2,wa-pdl-f32,wa-pdl-qgmma,wa-pdl-qgmma-wide}" >"$out/bench.log" 2>&1
echo "bench rc=$? $(t)" | tee -a "$out/bench.log"
# Every stall reason this ncu knows (the wgmma wait, "gmma", among them), warp cycles per issue.
S=$(ncu --query-metrics 2>/dev/null | grep -oE "^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active" | sort -u | sed 's/$/.ratio/' | paste -sd,)
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,sm__cycles_active.max,smsp__inst_executed.sum,smsp__inst_executed.avg.per_cycle_active,launch__grid_size,launch__registers_per_thread${S:+,$S}"
{
  for spec in ${NCU_SPECS:-"64:wa-pdl-qgmma-wide:q8" "64:wa-pdl-qgmma:q<" "64:wa-pdl-f32:wa"}; do
    IFS=: read -r b kern re <<<"$spec"
    [ "$(left)" -gt 40 ] || { echo "skipped $spec (time)"; continue; }
    echo "== ncu $kern B=$b"
    timeout 30 ncu --clock-control none -k regex:decode_gemm_"$re" -c 2 --metrics "$M" \
      "$D/moe_decode_bench" --reps 1 --only "$b" --kernels "$kern" 2>&1 | grep -vE "^\| B=|^\|---|^Decode|^\(packed|^$|^\| case"
  done
} >"$out/ncu.log" 2>&1
# The 64-row QGMMA gate/up kernel's executed instructions by opcode at B = 64 (where the instructions go).
[ "$(left)" -gt 60 ] && timeout 30 ncu --clock-control none -k regex:decode_gemm_q8 -c 1 --metrics sass__inst_executed_per_opcode \
  --print-metric-instances details "$D/moe_decode_bench" --reps 1 --only 64 --kernels wa-pdl-qgmma-wide >>"$out/ncu.log" 2>&1
echo "ncu done $(t)" | tee -a "$out/ncu.log"
lm=$(($(left) - 2))
[ "$lm" -gt 10 ] || lm=10
timeout "$lm" compute-sanitizer --tool memcheck --error-exitcode 9 "$D/moe_decode_test" \
  --gtest_filter='*SmallBatch*:*Skewed*:*Replays*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$? $(t)" | tee -a "$out/memcheck.log"
lm=$(($(left) - 2))
[ "$lm" -gt 10 ] || lm=10
timeout "$lm" compute-sanitizer --tool racecheck --error-exitcode 9 "$D/moe_decode_test" --gtest_filter='*Skewed*' >"$out/racecheck.log" 2>&1
echo "racecheck rc=$? $(t)" | tee -a "$out/racecheck.log"
grep -E "decode expert MLP|permute|rc=" "$out/bench.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g' | grep -E "QGMMA|kAuto|fp32 sums\)|rc=" | head -90
grep -E "qgmma|FAILED|PASSED|rc=" "$out/decode_test.log" | tail -30
grep -E "PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|rc=" "$out/memcheck.log" "$out/racecheck.log" | tail -8
