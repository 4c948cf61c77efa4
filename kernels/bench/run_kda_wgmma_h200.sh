#!/usr/bin/env bash
# One device run (nvidia-h200-x2, <= 150 s): the packed KDA state kernel on wgmma
# (KdaChunkArgs::state_mma = 2, the pick) against the mma.sync one (1), plain and pipelined (4 /
# 8 blocks), with three input stages and the L2 prefetch, at state tiles 32 and 64, alternating.
# GPU 1: fla chunk_kda 16K H32 (anchor; FLA_SHAPES to add 64K). GPU 0: tests + memcheck on the
# new cases, then kda_chunk_bench (bf16, picks otherwise).
# Run from the checkout root with this folder carried: OUT=dir bash .dev/kdawg/run_kda_wgmma_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_wgmma_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdawg
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 FLA_SHAPES=${FLA_SHAPES:-16384x32} \
    timeout "${FLA_TIMEOUT:-110}" python3 "$here/kda_chunk_fla.py" --dump /tmp/fla_dump >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests, memcheck beside them (GPU 0)"
{
  timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_pipeline_test" --gtest_filter='*WgmmaState*'
  echo "memcheck pipeline WgmmaState rc=$?"
  timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_kernels_test" --gtest_filter='*WgmmaState*'
  echo "memcheck kernels WgmmaState rc=$?"
} >"$out/memcheck.log" 2>&1 &
mc=$!
timeout 30 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|wgmma vs" "$out/kernels_test.log" | head -20
timeout 30 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/pipeline_test.log" | head
wait "$mc"
grep -E "ERROR SUMMARY|rc=" "$out/memcheck.log"
b() {  # label, T, tile, mma, blocks, buffers, prefetch
  timeout 15 "$here/bin/kda_chunk_bench" "$2" 32 "$3" 2 "$6" 0 0 "$5" 0 0 "$7" "$4" 2>&1 | sed "s/^/$1 /" | tee -a "$out/bench.log"
}
echo "== bench 16K H32"
for _ in 1 2; do
  date -u
  b mma_t32 16384 32 1 4,8 0 0      # the former default (mma.sync)
  b picks 16384 0 0 4,8 0 0         # the picks: wgmma, tile 32, 2 stages plain / 1 pipelined
  b wg_t32_s3 16384 32 2 4 3 0      # three stages
  b wg_t32_pf2 16384 32 2 4,8 0 2   # L2 prefetch 2 chunks ahead
  b wg_t32_pf4 16384 32 2 4 0 4
  b wg_t32_s3_pf4 16384 32 2 4 3 4
  b wg_t64_pf2 16384 64 2 4,8 0 2
done
echo "== bench 64K H32"
b mma_t32 65536 32 1 4,8 0 0
b picks 65536 0 0 4,8 0 0
b wg_t32_s3 65536 32 2 4,8 3 0
b wg_t32_pf2 65536 32 2 4,8 0 2
b wg_t32_s3_pf4 65536 32 2 4,8 3 4
wait "$side"
echo "== fla anchor (GPU 1)"
tail -6 "$out/fla.log"
date -u
