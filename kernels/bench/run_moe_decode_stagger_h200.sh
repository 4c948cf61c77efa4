#!/usr/bin/env bash
# moedec12's one device call (nvidia-h200, one GPU, < 200 s): moe_decode_test (all), memcheck of the
# cases the staggered forms touch, moe_decode_bench old (main's) vs new, ncu of the B = 1 kernels.
# Copy into a carried folder (bin/ = this build, old/ = main's moe_decode_bench, lib/) and run from the checkout root:
#   source kernels/bench/h200_env.sh .dev/moedec12/lib /work/main; OUT=dir bash .dev/moedec12/run.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
chmod +x "$D"/bin/* "$D"/old/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
timeout 45 stdbuf -oL "$D/bin/moe_decode_test" >"$out/decode_test.log" 2>&1
echo "moe_decode_test rc=$? $(t)" | tee -a "$out/decode_test.log"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" \
  --gtest_filter='*SmallBatch*:*Skewed*:*Replays*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$? $(t)" | tee -a "$out/memcheck.log"
K_OLD=wa-pdl,wa-pdl-l2,wa-pdl-f32
K_NEW=wa-pdl,wa-pdl-l2,wa-pdl-f32,wa-pdl-l2-stagger,wa-pdl-f32-stagger
timeout 30 stdbuf -oL "$D/old/moe_decode_bench" --reps 20 --kernels $K_OLD >"$out/bench_old.log" 2>&1
echo "bench old rc=$? $(t)" | tee -a "$out/bench_old.log"
timeout 35 stdbuf -oL "$D/bin/moe_decode_bench" --reps 20 --kernels $K_NEW >"$out/bench_new.log" 2>&1
echo "bench new rc=$? $(t)" | tee -a "$out/bench_new.log"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,sm__cycles_elapsed.max,smsp__inst_executed.sum,launch__grid_size
{
  for spec in "old wa-pdl-l2" "bin wa-pdl-l2-stagger" "old wa-pdl-f32" "bin wa-pdl-f32-stagger"; do
    read -r dir kern <<<"$spec"
    [ $(($(date +%s) - T0)) -lt 165 ] || { echo "skipped $spec (time)"; continue; }
    echo "== ncu $dir $kern B=1"
    timeout 25 ncu --clock-control none -k regex:decode_gemm_wa -c 2 --metrics $M \
      "$D/$dir/moe_decode_bench" --reps 1 --only 1 --kernels "$kern" 2>&1 | grep -vE "^\| B=|^\|---|^Decode|^\(packed|^$|^\| case"
  done
} >"$out/ncu.log" 2>&1
echo "ncu done $(t)" | tee -a "$out/ncu.log"
for f in bench_old bench_new; do
  echo "== $f"
  grep -E "decode expert MLP|rc=" "$out/$f.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g' | grep -E "B=(1|4|16|32|64)\b|rc="
done
grep -E "PASSED|FAILED|rc=" "$out/decode_test.log" "$out/memcheck.log" | tail -8
# Registers and the staggered gate/up kernel's load / fence order (kL2First form, narrow scales).
{
  cuobjdump --dump-resource-usage "$D/bin/moe_decode_bench" 2>&1 | grep -A1 "decode_gemm_wa" | grep -oE "Function [^ ]*|REG:[0-9]+ STACK:[0-9]+" | paste - - |
    grep -E "Lb1ELb0ELb1ELb0ELi1ELi1ELi1ELb0ELb[01]E|Lb1ELb0ELb1ELb0ELi1ELi0ELi1ELb1ELb[01]E|Lb0ELb0ELb1ELb0ELi1ELi0ELi1ELb[01]ELb0E"
  echo "== SASS order, staggered gate/up (L2 form): first 90 memory/barrier instructions"
  cuobjdump -sass "$D/bin/moe_decode_bench" 2>/dev/null | awk '/Function : .*decode_gemm_wa.*Lb1ELb0ELb1ELb0ELi1ELi1ELi1ELb0ELb1E/{p=1} p&&/Function : /&&!/Lb1ELb0ELb1ELb0ELi1ELi1ELi1ELb0ELb1E/{p=0} p' |
    grep -E "LDG|MEMBAR|FENCE|STS|BAR|CCTL|UBLKPF|EXIT" | head -90
} >"$out/sass.log" 2>&1
echo "sass done $(t)"
