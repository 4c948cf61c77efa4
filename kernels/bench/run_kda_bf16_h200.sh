#!/usr/bin/env bash
# One device run (nvidia-h200-x2) for the chunked KDA prefill's bf16 mode (docs/perf.md
# "bf16 mode"), within ~145 s. GPU 1: fla's chunk_kda (bf16, safe_gate) at the bench's shapes,
# its accuracy inputs and outputs dumped after the first (kda_chunk_fla.py --dump). GPU 0: the
# differential test, our benchmark (every precision, per-kernel times), compute-sanitizer
# memcheck where MEMCHECK=1, then ours and fla's error on fla's dumped inputs against the same
# fp32 CPU reference (kda_chunk_bench --accuracy). Run from the checkout root with this folder
# (binaries under bin/, libraries under lib/, wheels under whl/) carried:
#   OUT=dir [MEMCHECK=1] [FLA_TIMEOUT=s] [ACC_WAIT=s] [ONE_GPU=1] bash .dev/<branch>/run_kda_bf16_h200.sh
# ONE_GPU=1 (an nvidia-h200 of one GPU): fla on GPU 0 too; it compiles while our tests and
# bench run, and times only after our bench and accuracy step are done (FLA_GATE).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_bf16_out}
acc=/tmp/kda_acc
mkdir -p "$out"
gate=/tmp/kda_fla_gate
rm -rf "$acc" "$gate"
fla_gpu=1 fla_gate=
[ "${ONE_GPU:-0}" = 1 ] && fla_gpu=0 fla_gate=$gate
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdabf16
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  CUDA_VISIBLE_DEVICES=$fla_gpu FLA_GATE=$fla_gate PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout "${FLA_TIMEOUT:-120}" python3 "$here/kda_chunk_fla.py" --dump "$acc" >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
if [ "${MEMCHECK:-0}" = 1 ]; then  # alongside the tests (neither is timed)
  timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_kernels_test" \
    --gtest_filter='KdaChunk.Bf16WithinItsBound:KdaChunk.SixteenStateWarpsMatch' >"$out/memcheck.log" 2>&1 &
  mc=$!
fi
echo "== tests (GPU 0)"
timeout 45 "$here/bin/kda_chunk_kernels_test" >"$out/test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure|error:" "$out/test.log" | head -40
grep -E "nerr" "$out/test.log" | grep -E "bf16=1|warps=16|two calls" | head -60
if [ "${MEMCHECK:-0}" = 1 ]; then
  wait "$mc"; echo "memcheck rc=$?" >>"$out/memcheck.log"
  echo "== compute-sanitizer memcheck (GPU 0)"; tail -4 "$out/memcheck.log"
fi
echo "== bench (ours)"
timeout 75 "$here/bin/kda_chunk_bench" >"$out/bench.log" 2>&1; echo "bench rc=$?"
for tile in 16 64; do  # value columns per state block in bf16 (16: twice the CTAs; 64: half)
  timeout 10 "$here/bin/kda_chunk_bench" 16384 32 "$tile" 2 2 1 >>"$out/bench.log" 2>&1
done
cat "$out/bench.log"
echo "== accuracy on fla's inputs (GPU 0; waits for fla's dump)"
for _ in $(seq 1 "${ACC_WAIT:-120}"); do [ -f "$acc/meta.txt" ] && break; sleep 1; done
timeout 25 "$here/bin/kda_chunk_bench" --accuracy "$acc" 2>&1 | tee "$out/accuracy.log"
touch "$gate"
wait "$side"
echo "== fla anchor (GPU 1)"
tail -12 "$out/fla.log"
date -u
