#!/usr/bin/env bash
# One device run (nvidia-h200-x2) for the bf16 mode's leaner intra kernel (docs/perf.md "Leaner
# bf16 intra kernel"), within ~145 s. GPU 1: fla's chunk_kda (bf16, safe_gate;
# kda_chunk_fla.py, its first compile ~100 s a head count) started first. GPU 0:
# kda_chunk_kernels_test and kda_chunk_pipeline_test, compute-sanitizer memcheck on the bf16
# tests and the pipelined one beside them, then kda_chunk_bench --packed picks with the former
# build (old/kda_chunk_bench: the kernels before this change) and with this one, alternating.
# Run from the checkout root with this folder (bin/, old/, lib/, whl/) carried:
#   OUT=dir [FLA_TIMEOUT=s] [FLA_SHAPES=TxH,..] [NCU=1] bash .dev/<branch>/run_kda_intra_h200.sh
# NCU=1: ncu on the new bf16 packed intra kernel at T=16K H32 after the benches.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_intra_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdaintra /work/wt-kdast
chmod +x "$here"/bin/* "$here"/old/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 timeout "${FLA_TIMEOUT:-135}" python3 "$here/kda_chunk_fla.py" --dump /tmp/kda_acc >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== memcheck (bf16 tests, pipeline test) beside the tests (GPU 0)"
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
echo "== bench --packed picks: old build, new build, old again (GPU 0)"
for b in old/kda_chunk_bench bin/kda_chunk_bench; do
  date -u; echo "-- $b"
  timeout 40 "$here/$b" --packed picks >"$out/bench_$(dirname "$b").log" 2>&1; echo "bench rc=$?"
  cat "$out/bench_$(dirname "$b").log"
done
if [ "${NCU:-0}" = 1 ]; then
  echo "== ncu: new intra kernel, bf16 packed, T=16K H32 (GPU 0)"
  ncu_bin=$(command -v ncu || find /usr/local/cuda/bin /opt/nvidia -name ncu -type f 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ]; then
    timeout 40 "$ncu_bin" -k 'regex:intra' -c 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
      --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats \
      "$here/bin/kda_chunk_bench" 16384 32 32 2 2 1 8 "" 2 >"$out/ncu.log" 2>&1
    echo "ncu rc=$?" >>"$out/ncu.log"
    grep -E "intra|Duration|Throughput|Stall|Warp Cycles|Issued|Executed Ipc|Achieved Occupancy|Registers|Block Limit|Pipe|rc=" "$out/ncu.log" | head -50
  else
    echo "no ncu on this machine"
  fi
fi
wait "$side"
echo "== fla anchor (GPU 1)"
tail -10 "$out/fla.log"
date -u
