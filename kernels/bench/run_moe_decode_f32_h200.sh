#!/usr/bin/env bash
# One device call for the decode MoE kernel's moedec11 changes (docs/perf.md, branch moedec11),
# under 150 s on an `nvidia-h200-x2`:
#   GPU 1: moe_decode_test (all of it), moe_kernels_test, then compute-sanitizer memcheck of
#          moe_decode_test without the K3-shape and two-stream cases (their size; every kernel,
#          kWeightsAPdlF32 included, runs in the others)
#   GPU 0: the previous build's moe_decode_bench (old/) and this build's, side by side; the
#          torch anchor on the same routes; ncu instruction counts of the PDL forms at B = 64
# Copy into the carried folder (bin/, old/, lib/, moe_decode_torch.py) and run from the checkout root:
#   OUT=dir bash .dev/moedec11/run_moe_decode_f32_h200.sh
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
  {
    timeout 60 stdbuf -oL "$D/bin/moe_decode_test" 2>&1
    echo "moe_decode_test rc=$? $(t)"
    timeout 20 "$D/bin/moe_kernels_test" 2>&1
    echo "moe_kernels_test rc=$? $(t)"
  } >"$out/decode_test.log"
  timeout $((135 - ($(date +%s) - T0))) compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/moe_decode_test" \
    --gtest_filter='-*K3*:*TwoStreams*' >"$out/memcheck_decode.log" 2>&1
  echo "memcheck decode rc=$? $(t)" >>"$out/memcheck_decode.log"
}
bench() {  # $1: binary, $2: log, $3: kernels, $4...: extra arguments
  local bin=$1 log=$2 kernels=$3
  shift 3
  timeout 40 stdbuf -oL "$bin" --reps 20 --kernels "$kernels" "$@" >"$out/$log" 2>&1
  echo "decode bench rc=$? $(t)" >>"$out/$log"
}
{ CUDA_VISIBLE_DEVICES=1 tests; } &
side=$!
export CUDA_VISIBLE_DEVICES=0
bench "$D/old/moe_decode_bench" bench_old.log "${OLD_KERNELS:-wa-pdl,wa-pdl-l2,fused-split}"
bench "$D/bin/moe_decode_bench" bench_new.log "${KERNELS:-wa-pdl,wa-pdl-l2,wa-pdl-f32,fused-split}" --routes "$out/routes.txt"
timeout 35 python3 -u "$D/moe_decode_torch.py" "$out/routes.txt" >"$out/torch.log" 2>&1
echo "torch rc=$? $(t)" >>"$out/torch.log"
{
  for spec in "old wa-pdl" "bin wa-pdl" "bin wa-pdl-f32"; do
    read -r dir kern <<<"$spec"
    set -- "$dir" "$kern"
    [ $(($(date +%s) - T0)) -lt 120 ] || break
    echo "== ncu $1 $2"
    timeout 25 ncu --clock-control none -k regex:decode_gemm_wa -c 2 \
      --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum \
      "$D/$1/moe_decode_bench" --reps 1 --only 64 --kernels "$2" 2>&1 | grep -E "decode_gemm_wa|inst_executed|duration|bytes_read"
  done
} >"$out/ncu.log" 2>&1
wait "$side"
for f in bench_old bench_new; do
  echo "== $f"
  grep -E "expert MLP|kAuto|graph|anchor|rc=" "$out/$f.log" | sed -E 's/decode expert MLP //; s/ +\|/|/g'
done
echo "== torch"; grep -vE "^\s*$" "$out/torch.log" | tail -20
echo "== decode test (GPU 1)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/decode_test.log" | head -30
grep -E "error [0-9.e-]*$" "$out/decode_test.log" | grep -E "f32|auto\)|pdl \(" | head -40
echo "== memcheck"
grep -shE "ERROR SUMMARY|rc=|^\[  (PASSED|FAILED) |^\[  FAILED" "$out"/memcheck_*.log
echo "== ncu"; cat "$out/ncu.log"
