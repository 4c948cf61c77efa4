#!/usr/bin/env bash
# One device call for the decode MoE kernel's split/PDL forms (docs/perf.md, branch moedec4),
# under 100 s. GPU 0: moe_decode_bench (the weights-on-A and fused forms, --routes), then the
# torch anchor on the same routes, then ncu of kFusedSplit at B=64 if time is left. GPU 1 meanwhile: moe_decode_test, compute-sanitizer memcheck
# of its small cases, moe_kernels_test, cuda_forward_test (backend regression).
# Copy this file into the carried folder (bin/, lib/, moe_decode_torch.py) and run from the
# checkout root:   OUT=dir bash .dev/moedec4/run_moe_decode4_h200.sh
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moe_out}
mkdir -p "$out"
# cuda_forward_test reads its golden fixtures under the source path it was built from.
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$D/lib" /work/wt-moedec4
chmod +x "$D"/bin/* 2>/dev/null
T0=$(date +%s)
t() { echo "t=$(($(date +%s) - T0))s"; }
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader; } | tee "$out/env.log"
# moe_decode_test's 35 s was too short in the moedec4 call (the K3 case repacks and recomputes
# the CPU reference per kernel); raise it (and trim elsewhere) before reusing this script.
(
  g1() { CUDA_VISIBLE_DEVICES=1 "$@"; }
  g1 timeout 35 stdbuf -oL "$D/bin/moe_decode_test" >"$out/decode_test.log" 2>&1
  echo "moe_decode_test rc=$? $(t)" >>"$out/decode_test.log"
  g1 timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" --gtest_filter='-*K3*:*TwoStreams*' \
    >"$out/memcheck_decode.log" 2>&1
  echo "memcheck decode rc=$? $(t)" >>"$out/memcheck_decode.log"
  g1 timeout 8 stdbuf -oL "$D/bin/moe_kernels_test" >"$out/kernels_test.log" 2>&1
  echo "moe_kernels_test rc=$? $(t)" >>"$out/kernels_test.log"
  g1 timeout 18 stdbuf -oL "$D/bin/cuda_forward_test" >"$out/forward.log" 2>&1
  echo "cuda_forward_test rc=$? $(t)" >>"$out/forward.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
timeout 50 stdbuf -oL "$D/bin/moe_decode_bench" --reps 20 --routes "$out/routes.txt" \
  --kernels wa-noprefetch,wa-strided,fused,fused-split,fused-split-pdl >"$out/decode_bench.log" 2>&1
echo "decode bench rc=$? $(t)" >>"$out/decode_bench.log"
timeout 32 python3 -u "$D/moe_decode_torch.py" "$out/routes.txt" >"$out/torch.log" 2>&1
echo "torch rc=$? $(t)" >>"$out/torch.log"
# ncu of the split form at B=64 with whatever time is left (the call's limit is 100 s).
left=$((88 - ($(date +%s) - T0)))
if [ "$left" -gt 12 ]; then
  timeout "$left" ncu --clock-control none -k regex:decode_fused -c 1 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --metrics smsp__inst_executed.sum,dram__bytes_read.sum \
    "$D/bin/moe_decode_bench" --reps 1 --only 64 --kernels fused-split >"$out/ncu_split64.log" 2>&1
  echo "ncu rc=$? $(t)" >>"$out/ncu_split64.log"
fi
wait "$side"
echo "== decode bench"
grep -E "expert MLP \((weights on A, no|weights on A, strided|fused)|kAuto|graph|rc=" "$out/decode_bench.log" |
  sed -E 's/decode expert MLP //; s/ +\|/|/g'
echo "== torch"; grep -E "B=|rc=" "$out/torch.log" | head -40
echo "== decode test (GPU 1)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/decode_test.log" | head -20
grep -E "fused split|auto" "$out/decode_test.log" | head -12
echo "== ncu (fused split, B=64)"
grep -sE "Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|inst_executed|dram__bytes|Registers Per|Achieved Occupancy|rc=" "$out/ncu_split64.log" | head -14
echo "== memcheck / kernels / forward"
grep -hE "ERROR SUMMARY|rc=|^\[  (PASSED|FAILED) |^\[  FAILED" "$out"/memcheck_*.log "$out/kernels_test.log" "$out/forward.log"
