#!/usr/bin/env bash
# One device run (nvidia-h200-x2) for the chunked KDA prefill's pipelined schedule
# (docs/perf.md "Pipelined intra / state schedule"), within ~145 s. GPU 1: fla's chunk_kda
# (bf16, safe_gate; kda_chunk_fla.py --dump, its first compile ~100 s) started first. GPU 0:
# kda_chunk_pipeline_test (pipelined == plain, bitwise), then compute-sanitizer memcheck on it
# beside the existing kda_chunk_kernels_test (the plain path's launcher was reshaped), then
# kda_chunk_bench --pipeline (plain vs 4 / 8 blocks, every precision, T 16K / 64K, H 32 / 24).
# Run from the checkout root with this folder (bin/, lib/, whl/) carried:
#   OUT=dir [FLA_TIMEOUT=s] [ONE_GPU=1] bash .dev/<branch>/run_kda_pipe_h200.sh
# ONE_GPU=1 (an nvidia-h200 of one GPU): fla on GPU 0, timing only after our bench (FLA_GATE).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_pipe_out}
mkdir -p "$out"
gate=/tmp/kda_fla_gate
rm -rf /tmp/kda_acc "$gate"
fla_gpu=1 fla_gate=
[ "${ONE_GPU:-0}" = 1 ] && fla_gpu=0 fla_gate=$gate
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdapipe
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=$fla_gpu FLA_GATE=$fla_gate PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout "${FLA_TIMEOUT:-135}" python3 "$here/kda_chunk_fla.py" --dump /tmp/kda_acc >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== kda_chunk_pipeline_test (GPU 0)"
timeout 30 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED|Failure|differs|bit-identical" "$out/pipeline_test.log" | head -60
echo "== memcheck on it, beside kda_chunk_kernels_test (GPU 0, untimed)"
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_pipeline_test" >"$out/memcheck.log" 2>&1 &
mc=$!
timeout 45 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/kernels_test.log" | head -20
wait "$mc"; echo "memcheck rc=$?"; tail -4 "$out/memcheck.log"
echo "== bench --pipeline (GPU 0)"
date -u
timeout 62 "$here/bin/kda_chunk_bench" --pipeline >"$out/bench.log" 2>&1; echo "bench rc=$?"
cat "$out/bench.log"
date -u
touch "$gate"
wait "$side"
echo "== fla anchor (GPU $fla_gpu)"
tail -10 "$out/fla.log"
date -u
