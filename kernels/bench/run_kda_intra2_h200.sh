#!/usr/bin/env bash
# One device run (nvidia-h200-x2, <= 150 s) for the bf16 intra kernel's bf16-staged [w | u]
# operands and float4 solve rows (docs/perf.md "bf16 [w | u] operands by ldmatrix").
# GPU 1: fla's chunk_kda (bf16, safe_gate; kda_chunk_fla.py, ~100 s to compile a head count),
# started first. GPU 0: kda_chunk_kernels_test and kda_chunk_pipeline_test with compute-sanitizer
# memcheck on the bf16 tests and the pipelined one beside them; then kda_chunk_bench at T=16K H32
# with the launcher's picks (plain and 2/4/6/8 pipelined blocks), the former build (old/: main
# before this change) and this one alternating twice; then --packed picks (all four shapes) for
# both while time is left; NCU=1: ncu on the new intra kernel at the end.
# Run from the checkout root with this folder (bin/, old/, lib/, whl/) carried:
#   OUT=dir [FLA_TIMEOUT=s] [FLA_SHAPES=TxH,..] [NCU=1] bash .dev/<branch>/run_kda_intra2_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_intra2_out}
mkdir -p "$out"
start=$(date +%s)
left() { echo $((${BUDGET_S:-140} - ($(date +%s) - start))); }
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdaintra2 /work/wt-kdaintra
chmod +x "$here"/bin/* "$here"/old/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 timeout "${FLA_TIMEOUT:-130}" python3 "$here/kda_chunk_fla.py" >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests, memcheck beside them (GPU 0)"
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_kernels_test" \
  --gtest_filter='*PackedBf16*:*StateCarried*:*Bf16Within*' >"$out/memcheck.log" 2>&1 &
mc=$!
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_pipeline_test" >"$out/memcheck_pipe.log" 2>&1 &
mcp=$!
timeout 40 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|bf16" "$out/kernels_test.log" | head -40
timeout 30 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/pipeline_test.log" | head -20
wait "$mc"; echo "memcheck rc=$?"; tail -4 "$out/memcheck.log"
wait "$mcp"; echo "memcheck pipeline rc=$?"; tail -3 "$out/memcheck_pipe.log"
echo "== bench T=16K H32, launcher's picks: old, new, old, new (GPU 0)"
for b in old bin old bin; do
  date -u; echo "-- $b"
  timeout 20 "$here/$b/kda_chunk_bench" 16384 32 0 2 0 0 8 2,4,6,8 0 2>&1 | tee -a "$out/bench16k_$b.log"
done
for b in bin old; do
  t=$(($(left) - ${NCU_S:-0} - 5))
  [ "$t" -gt 10 ] || { echo "no time left for --packed picks ($b)"; continue; }
  date -u; echo "-- $b --packed picks (timeout $t)"
  timeout "$t" stdbuf -oL "$here/$b/kda_chunk_bench" --packed picks >"$out/bench_picks_$b.log" 2>&1; echo "bench rc=$?"
  cat "$out/bench_picks_$b.log"
done
if [ "${NCU:-0}" = 1 ]; then
  echo "== ncu: new intra kernel, bf16 packed, T=16K H32 (GPU 0)"
  ncu_bin=$(command -v ncu || find /usr/local/cuda/bin /opt/nvidia -name ncu -type f 2>/dev/null | head -1)
  t=$(($(left) - 3))
  if [ -n "$ncu_bin" ] && [ "$t" -gt 10 ]; then
    timeout "$t" "$ncu_bin" -k 'regex:intra' -c 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
      --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis \
      "$here/bin/kda_chunk_bench" 16384 32 32 2 2 1 8 "" 2 >"$out/ncu.log" 2>&1
    echo "ncu rc=$?" >>"$out/ncu.log"
    grep -E "intra|Duration|Throughput|Stall|Warp Cycles|Issued|Executed Ipc|Achieved Occupancy|Registers|Block Limit|Pipe|rc=" "$out/ncu.log" | head -50
  else
    echo "no ncu run (binary: ${ncu_bin:-none}, time left ${t}s)"
  fi
fi
wait "$side"
echo "== fla anchor (GPU 1)"
tail -10 "$out/fla.log"
date -u
