#!/usr/bin/env bash
# moedec13's device call (nvidia-h200, one GPU, < 200 s): moe_decode_test (all), memcheck of the
# cases that run the wgmma forms at small shapes, moe_decode_bench with kAuto's forms and the wgmma
# forms in one run, ncu of the wgmma gate/up + down kernels at B = 1 and 64 against kAuto's forms.
# Copy into a carried folder (bin/ = this build, lib/) and run from the checkout root:
#   source kernels/bench/h200_env.sh .dev/moedec13/lib /work/main; OUT=dir bash .dev/moedec13/run.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
chmod +x "$D"/bin/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
timeout 60 stdbuf -oL "$D/bin/moe_decode_test" >"$out/decode_test.log" 2>&1
echo "moe_decode_test rc=$? $(t)" | tee -a "$out/decode_test.log"
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" \
  --gtest_filter='*SmallBatch*:*Skewed*:*Replays*:*ScalesAbove*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$? $(t)" | tee -a "$out/memcheck.log"
timeout 40 stdbuf -oL "$D/bin/moe_decode_bench" --reps 20 --kernels wa-pdl-l2,wa-pdl-f32,wa-pdl-wgmma,wa-pdl-wgmma3 >"$out/bench.log" 2>&1
echo "bench rc=$? $(t)" | tee -a "$out/bench.log"
M=gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_active.avg,sm__cycles_active.max,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.avg.per_cycle_active,launch__grid_size,launch__registers_per_thread
{
  for spec in "1 wa-pdl-wgmma wg" "1 wa-pdl-l2 wa" "64 wa-pdl-wgmma wg" "64 wa-pdl-f32 wa" "1 wa-pdl-wgmma3 wg" "64 wa-pdl-wgmma3 wg"; do
    read -r b kern re <<<"$spec"
    [ $(($(date +%s) - T0)) -lt 170 ] || { echo "skipped $spec (time)"; continue; }
    echo "== ncu $kern B=$b"
    timeout 25 ncu --clock-control none -k regex:decode_gemm_"$re" -c 2 --metrics $M \
      "$D/bin/moe_decode_bench" --reps 1 --only "$b" --kernels "$kern" 2>&1 | grep -vE "^\| B=|^\|---|^Decode|^\(packed|^$|^\| case"
  done
} >"$out/ncu.log" 2>&1
echo "ncu done $(t)" | tee -a "$out/ncu.log"
grep -E "decode expert MLP|rc=" "$out/bench.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g' | grep -E "B=(1|4|16|64)\b|rc="
grep -E "PASSED|FAILED|rc=" "$out/decode_test.log" "$out/memcheck.log" | tail -8
