#!/usr/bin/env bash
# One device run (nvidia-h200-x2, <= 120 s) for the bf16 intra kernel with k and q staged as bf16
# (docs/perf.md "bf16 k and q staging"): one binary holds both intra kernels
# (KdaChunkArgs::bf16_intra, the bench's 10th argument: 1 the former fp32 k / q staging, 2 bf16).
# GPU 1: fla's chunk_kda at T=16K H32 (bf16, safe_gate; kda_chunk_fla.py, ~100 s to compile),
# started first. GPU 0: kda_chunk_kernels_test and kda_chunk_pipeline_test with
# compute-sanitizer memcheck on the bf16 tests beside them; then, once the GPU is free,
# kda_chunk_bench at T=16K and 64K H32 with the launcher's picks (plain and 4 pipelined
# blocks), the former intra kernel and the new one alternating twice. Logs under $OUT.
# Run from the checkout root with this folder (bin/, lib/, whl/, kda_chunk_fla.py) carried:
#   OUT=dir [FLA_TIMEOUT=s] [FLA_SHAPES=TxH,..] bash .dev/<branch>/run_kda_intra3_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_intra3_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdaintra3
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 FLA_SHAPES=${FLA_SHAPES:-16384x32} \
    timeout "${FLA_TIMEOUT:-115}" python3 "$here/kda_chunk_fla.py" >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests, memcheck beside them (GPU 0)"
mc() {  # name, binary, gtest filter
  timeout 72 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/$2" --gtest_filter="$3" >"$out/memcheck_$1.log" 2>&1
  echo "memcheck $1 rc=$?" >>"$out/memcheck_$1.log"
}
mc intra kda_chunk_kernels_test '*Bf16IntraKernelsAgree*' &
mca=$!
mc ws kda_chunk_kernels_test '*PackedBf16*:*StateCarried*:*Bf16Within*' &
mcb=$!
mc pipe kda_chunk_pipeline_test '*' &
mcc=$!
timeout 40 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|bf16" "$out/kernels_test.log" | head -50
timeout 30 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/pipeline_test.log" | head -20
wait "$mca" "$mcb" "$mcc"
for f in intra ws pipe; do tail -4 "$out/memcheck_$f.log"; done
echo "== bench T=16K / 64K H32, launcher's picks, plain and 4 blocks: intra 1 (former), 2 (new), 1, 2 (GPU 0)"
for _ in 1 2; do
  for intra in 1 2; do
    for T in 16384 65536; do
      date -u
      timeout 15 "$here/bin/kda_chunk_bench" "$T" 32 0 2 0 0 8 4 0 "$intra" 2>&1 | tee -a "$out/bench_intra$intra.log"
    done
  done
done
wait "$side"
echo "== fla anchor (GPU 1)"
tail -6 "$out/fla.log"
date -u
