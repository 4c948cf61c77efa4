#!/usr/bin/env bash
# One device run (nvidia-h200-x2, <= 150 s): the packed KDA wgmma state kernel with a head's CTAs
# as one cluster and TMA multicast of their shared inputs (KdaChunkArgs::state_mma = 3) against
# the plain wgmma one (2, the pick), alternating, plain and pipelined, at 16K and 64K H32.
# GPU 1: fla chunk_kda (anchor; FLA_SHAPES). GPU 0: tests + memcheck on the new cases, then
# kda_chunk_bench (bf16, picks otherwise).
# Second call: every wgmma unserialised (Aqk v_new in both warpgroups), the relaxed cluster
# barrier (3) and per-stage empty mbarriers (4), against branch kdawg's binary (bin/*_old).
# Run from the checkout root with this folder carried: OUT=dir bash .dev/kdawg2/run_kda_mc_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_mc_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdawg2
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 FLA_SHAPES=${FLA_SHAPES:-16384x32,65536x32} \
    timeout "${FLA_TIMEOUT:-120}" python3 "$here/kda_chunk_fla.py" --dump /tmp/fla_dump >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests, memcheck beside them (GPU 0)"
{
  timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_kernels_test" --gtest_filter='*WgmmaStateMulticast*'
  echo "memcheck kernels WgmmaStateMulticast rc=$?"
  timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_pipeline_test" --gtest_filter='*WgmmaMulticast*'
  echo "memcheck pipeline WgmmaMulticast rc=$?"
} >"$out/memcheck.log" 2>&1 &
mc=$!
timeout 40 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|multicast output" "$out/kernels_test.log" | head -20
timeout 40 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/pipeline_test.log" | head
wait "$mc"
grep -E "ERROR SUMMARY|rc=" "$out/memcheck.log"
(cuobjdump -res-usage "$here/bin/kda_chunk_bench" 2>&1 | grep -A1 state_wgmma_kernel >"$out/res_usage.log") || true
# A multicast kernel that failed its tests is not timed (a hang would eat the call).
mcok=0
grep -q "^\[       OK \] KdaChunk.WgmmaStateMulticastMatchesWgmma" "$out/kernels_test.log" && mcok=1
echo "multicast timed: $mcok"
b() {  # label, T, tile, mma, blocks, buffers [binary]
  [ "$4" -ge 3 ] && [ "$mcok" != 1 ] && return
  timeout 20 "$here/bin/${7:-kda_chunk_bench}" "$2" 32 "$3" 2 "$6" 0 0 "$5" 0 0 0 "$4" 2>&1 | sed "s/^/$1 /" | tee -a "$out/bench.log"
}
# old: kda_chunk_bench of branch kdawg (main's wgmma kernel, its Aqk wgmma in WG1 only).
echo "== bench 16K H32"
for _ in 1 2; do
  date -u
  b old_wg 16384 32 2 4,8 0 kda_chunk_bench_old
  b wg 16384 32 2 4,8 0          # the pick's kernel, every wgmma unserialised
  b mc 16384 32 3 4,8 0          # multicast, cluster of 4, relaxed cluster barrier a chunk
  b mcb 16384 32 4 4,8 0         # multicast, per-stage empty mbarriers
  b mcb_t64 16384 64 4 4 0       # multicast, cluster of 2
done
b wg_s3 16384 32 2 4 3
b mcb_s3 16384 32 4 4 3
echo "== bench 64K H32"
for _ in 1 2; do
  b old_wg 65536 32 2 8 0 kda_chunk_bench_old
  b wg 65536 32 2 4,8 0
  b mc 65536 32 3 8 0
  b mcb 65536 32 4 4,8 0
done
wait "$side"
echo "== fla anchor (GPU 1)"
tail -6 "$out/fla.log"
date -u
