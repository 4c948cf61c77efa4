#!/usr/bin/env bash
# One device run (nvidia-h200-x2, <= 120 s): the packed state kernel on 16 warps at tile 64 (64
# state CTAs at H32 D128, each covering 64 value columns) against tile 32 / 8 warps (the default)
# and tile 64 / 8 warps, plain and pipelined (4 / 8 blocks).
# GPU 1: fla chunk_kda 16K H32 (anchor). GPU 0: tests + memcheck on the new cases, then
# kda_chunk_bench (bf16, picks), alternating.
# Run from the checkout root with this folder carried: OUT=dir bash .dev/kdastate16/run_kda_state16_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_state16_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdastate16
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 FLA_SHAPES=16384x32 \
    timeout "${FLA_TIMEOUT:-80}" python3 "$here/kda_chunk_fla.py" --dump /tmp/fla_dump >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests, memcheck beside them (GPU 0)"
{
  timeout 35 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_pipeline_test" --gtest_filter='*PackedStateWarps*'
  echo "memcheck pipeline PackedStateWarps rc=$?"
  timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_kernels_test" --gtest_filter='*PackedBf16Workspace*'
  echo "memcheck kernels PackedBf16Workspace rc=$?"
} >"$out/memcheck.log" 2>&1 &
mc=$!
timeout 25 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/kernels_test.log" | head
timeout 25 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/pipeline_test.log" | head
wait "$mc"
grep -E "ERROR SUMMARY|rc=" "$out/memcheck.log"
b() {  # label, T, tile, warps, blocks
  timeout 12 "$here/bin/kda_chunk_bench" "$2" 32 "$3" 2 0 0 "$4" "$5" 0 0 0 2>&1 | sed "s/^/$1 /" | tee -a "$out/bench.log"
}
echo "== bench 16K H32"
for _ in 1 2; do
  date -u
  b t32w8 16384 0 8 4,8
  b t64w16 16384 64 16 4,8
done
b t64w8 16384 64 8 4,8
echo "== bench 64K H32"
b t32w8 65536 0 8 4,8
b t64w16 65536 64 16 4,8
wait "$side"
echo "== fla anchor (GPU 1)"
tail -6 "$out/fla.log"
date -u
