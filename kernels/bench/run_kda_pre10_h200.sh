#!/usr/bin/env bash
# One device run (nvidia-h200-x2, <= 120 s): does the pipelined schedule gain from a state pass on
# fewer SMs (state tile 64: 64 CTAs at H32 D128, leaving 68 SMs to two intra CTAs each)?
# GPU 1: fla chunk_kda 16K / 64K H32 (anchor). GPU 0: tests + memcheck, then kda_chunk_bench
# (bf16, picks) pipelined at tiles 32 (default) / 64 / 16, blocks 4 / 8, alternating.
# Run from the checkout root with this folder carried: OUT=dir bash .dev/kdapre10/run_kda_pre10_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_pre10_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdapre10
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 FLA_SHAPES=16384x32,65536x32 \
    timeout "${FLA_TIMEOUT:-90}" python3 "$here/kda_chunk_fla.py" --dump /tmp/fla_dump >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests, memcheck beside them (GPU 0)"
( timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_pipeline_test" --gtest_filter='*OneSequence*:*SeveralPasses*' >"$out/memcheck_pipe.log" 2>&1
  echo "memcheck pipe rc=$?" >>"$out/memcheck_pipe.log" ) &
mcp=$!
timeout 30 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/kernels_test.log" | head
timeout 25 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/pipeline_test.log" | head
wait "$mcp"
tail -2 "$out/memcheck_pipe.log"
b() {  # label, T, tile, blocks, [intra]
  timeout 12 "$here/bin/kda_chunk_bench" "$2" 32 "$3" 2 0 0 8 "$4" 0 "${5:-0}" 0 2>&1 | sed "s/^/$1 /" | tee -a "$out/bench.log"
}
echo "== bench 16K H32"
for _ in 1 2; do
  date -u
  b t32 16384 0 4,8
  b t64 16384 64 4,8
done
b t64-kq16 16384 64 4 2
b t16 16384 16 4
echo "== bench 64K H32"
b t32 65536 0 4
b t64 65536 64 4,8
wait "$side"
echo "== fla anchor (GPU 1)"
tail -6 "$out/fla.log"
date -u
