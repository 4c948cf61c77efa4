#!/usr/bin/env bash
# One device run (nvidia-h200-x2, <= 150 s) for the packed state kernel's L2 prefetch and bf16
# B-operand staging (docs/perf.md "State kernel: bf16 B operands, L2 prefetch"). bin/ holds this
# branch's binaries, old/ main's kda_chunk_bench built before the change.
# GPU 1: fla's chunk_kda at T=16K and 64K H32 (bf16, safe_gate; kda_chunk_fla.py), started first.
# GPU 0: kda_chunk_kernels_test and kda_chunk_pipeline_test with compute-sanitizer memcheck
# beside them; then, once the GPU is free, kda_chunk_bench (bf16, the launcher's picks, plain and
# 4 pipelined blocks) at T=16K and 64K H32: old, new with prefetch off (-1), new with the pick
# (0; prefetch 2 in the branch's device run, off since), twice alternating; then prefetch 1 and 4,
# block counts, two state buffers beside the bf16 k / q intra kernel, and H24 old / new once.
# Logs under $OUT.
# Run from the checkout root with this folder (bin/, old/, lib/, whl/, kda_chunk_fla.py) carried:
#   OUT=dir [FLA_TIMEOUT=s] [FLA_SHAPES=TxH,..] bash .dev/<branch>/run_kda_pre9_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_pre9_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdapre9
chmod +x "$here"/bin/* "$here"/old/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_ACC=0 FLA_SHAPES=${FLA_SHAPES:-16384x32,65536x32} \
    timeout "${FLA_TIMEOUT:-130}" python3 "$here/kda_chunk_fla.py" --dump /tmp/fla_dump >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests, memcheck beside them (GPU 0)"
mc() {  # name, binary, gtest filter
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/$2" --gtest_filter="$3" >"$out/memcheck_$1.log" 2>&1
  echo "memcheck $1 rc=$?" >>"$out/memcheck_$1.log"
}
mc ws kda_chunk_kernels_test '*PackedBf16*:*StateCarried*:*Bf16Within*' &
mca=$!
mc pipe kda_chunk_pipeline_test '*StatePrefetch*:*OneSequence*:*CapturedGraph*' &
mcb=$!
timeout 40 "$here/bin/kda_chunk_kernels_test" >"$out/kernels_test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|packed vs" "$out/kernels_test.log" | head -30
timeout 30 "$here/bin/kda_chunk_pipeline_test" >"$out/pipeline_test.log" 2>&1; echo "kda_chunk_pipeline_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|prefetch" "$out/pipeline_test.log" | head -20
wait "$mca" "$mcb"
for f in ws pipe; do tail -3 "$out/memcheck_$f.log"; done
b() {  # label, binary dir, T, H, [prefetch [blocks [buffers [intra]]]]
  timeout 15 "$here/$2/kda_chunk_bench" "$3" "$4" 0 2 "${7:-0}" 0 8 "${6:-4}" 0 "${8:-0}" ${5:+"$5"} 2>&1 | sed "s/^/$1 /" | tee -a "$out/bench.log"
}
echo "== bench H32 (GPU 0): old, new pf off, new pick; twice"
for _ in 1 2; do
  for T in 16384 65536; do
    date -u
    b old old "$T" 32
    b new-off bin "$T" 32 -1
    b new-pick bin "$T" 32 0
  done
done
echo "== bench H32 prefetch 1 / 4, block counts, two state buffers beside the bf16 k/q intra; H24 old / new"
for T in 16384 65536; do
  b new-pf1 bin "$T" 32 1
  b new-pf4 bin "$T" 32 4
  b new-blocks bin "$T" 32 0 2,3,6,8
  b new-db-kq16 bin "$T" 32 0 4 2 2
  b old old "$T" 24
  b new-pick bin "$T" 24 0
done
command -v cuobjdump >/dev/null && cuobjdump --dump-resource-usage "$here/bin/kda_chunk_bench" 2>&1 | grep -A1 "state_kernel" | grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*" | sort | uniq -c
wait "$side"
echo "== fla anchor (GPU 1)"
tail -8 "$out/fla.log"
date -u
