#!/usr/bin/env bash
# One device run (nvidia-h200-x2) for the chunked KDA prefill's packed bf16 workspace
# (docs/perf.md "Packed bf16 workspace"), within ~145 s. GPU 1: fla's chunk_kda (bf16,
# safe_gate; kda_chunk_fla.py --dump, its first compile ~100 s) started first. GPU 0:
# kda_chunk_kernels_test and kda_chunk_pipeline_test, compute-sanitizer memcheck on the packed
# workspace's test and the pipelined one beside them, then kda_chunk_bench --packed (fp32 vs
# packed workspace, one / two buffers, plain and pipelined) and, if fla's dump is there by
# then, kda_chunk_bench --accuracy on it.
# Run from the checkout root with this folder (bin/, lib/, whl/) carried:
#   OUT=dir [FLA_TIMEOUT=s] [ACC_WAIT=s] [BENCH_PICKS=1] [FLA_SHAPES=TxH,..] [FLA_ACC=0] bash .dev/<branch>/run_kda_packed_h200.sh
# BENCH_PICKS=1: the bench's short form (the former default vs the launcher's picks);
# FLA_SHAPES, FLA_ACC: passed to kda_chunk_fla.py (its shapes; 0: no accuracy step); NCU=1:
# ncu on the bf16 packed intra and state kernels after the bench.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_packed_out}
mkdir -p "$out"
rm -rf /tmp/kda_acc
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdast
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout "${FLA_TIMEOUT:-135}" python3 "$here/kda_chunk_fla.py" --dump /tmp/kda_acc >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== memcheck (packed workspace test, pipeline test) beside the tests (GPU 0)"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_kernels_test" \
  --gtest_filter='*PackedBf16*:*StateCarried*' >"$out/memcheck.log" 2>&1 &
mc=$!
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_pipeline_test" >"$out/memcheck_pipe.log" 2>&1 &
mcp=$!
timeout 40 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|packed vs fp32" "$out/kernels_test.log" | head -40
timeout 30 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/pipeline_test.log" | head -20
wait "$mc"; echo "memcheck rc=$?"; tail -4 "$out/memcheck.log"
wait "$mcp"; echo "memcheck pipeline rc=$?"; tail -3 "$out/memcheck_pipe.log"
echo "== bench --packed (GPU 0)"
date -u
timeout 45 "$here/bin/kda_chunk_bench" --packed ${BENCH_PICKS:+picks} >"$out/bench.log" 2>&1; echo "bench rc=$?"
cat "$out/bench.log"
date -u
if [ "${NCU:-0}" = 1 ]; then  # where the intra kernel's time goes (bf16, packed, T=16K H32), once each
  echo "== ncu: intra and state kernels, bf16 packed, T=16K H32 (GPU 0)"
  ncu_bin=$(command -v ncu || find /usr/local/cuda/bin /opt/nvidia -name ncu -type f 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ]; then
    timeout 45 "$ncu_bin" -k 'regex:intra_kernel|state_kernel' -c 2 --section SpeedOfLight --section WarpStateStats \
      --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      "$here/bin/kda_chunk_bench" 16384 32 32 2 2 1 8 "" 2 >"$out/ncu.log" 2>&1
    echo "ncu rc=$?" >>"$out/ncu.log"
    grep -E "intra_kernel|state_kernel|Duration|Throughput|Stall|Warp Cycles|Issued|Achieved Occupancy|Registers|Block Limit|Pipe|rc=" "$out/ncu.log" | head -70
  else
    echo "no ncu on this machine"
  fi
fi
for _ in $(seq 1 "${ACC_WAIT:-10}"); do [ -e /tmp/kda_acc/meta.txt ] && break; sleep 1; done
if [ -e /tmp/kda_acc/meta.txt ]; then timeout 20 "$here/bin/kda_chunk_bench" --accuracy /tmp/kda_acc; else echo "no fla dump yet"; fi
wait "$side"
echo "== fla anchor (GPU 1)"
tail -10 "$out/fla.log"
date -u
