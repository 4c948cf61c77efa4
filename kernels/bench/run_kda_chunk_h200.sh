#!/usr/bin/env bash
# One device run (nvidia-h200-x2) for the chunked KDA prefill (docs/perf.md), within ~140 s.
# GPU 0: the differential test, our benchmark, then compute-sanitizer memcheck on a few small
# differential tests (both output places, several passes, reused tables); GPU 1 meanwhile: the
# backend forward tests (the chunked prefill wired in), then fla's chunk_kda on the same
# shapes (the anchor; bf16 first, later variants as time allows). Run from the checkout root with this folder (binaries under bin/, libraries under
# lib/, wheels under whl/) carried:
#   OUT=dir bash .dev/<branch>/run_kda_chunk_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_chunk_out}
mkdir -p "$out"
# The golden-fixture tests look under the source path the binaries were built from (linked here).
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdapre /work/wt-kdapre2 /work/wt-kdapre3
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  CUDA_VISIBLE_DEVICES=1 timeout 30 "$here/bin/cuda_forward_test" >"$out/forward.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/forward.log"
  whl=.whl; [ -d "$here/whl" ] && whl="$here/whl"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$whl"/*.whl
  CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout "${FLA_TIMEOUT:-100}" python3 "$here/kda_chunk_fla.py" >"$out/fla.log" 2>&1
  echo "fla rc=$?" >>"$out/fla.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests (GPU 0)"
timeout 40 "$here/bin/kda_chunk_kernels_test" >"$out/test.log" 2>&1; echo "kda_chunk_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure|error:" "$out/test.log" | head -40
grep -E "nerr" "$out/test.log" | head -80
echo "== bench (ours)"
timeout 55 "$here/bin/kda_chunk_bench" >"$out/bench.log" 2>&1; echo "bench rc=$?"
cat "$out/bench.log"
echo "== compute-sanitizer memcheck (GPU 0)"
timeout 35 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_chunk_kernels_test" \
  --gtest_filter='KdaChunk.UploadedTablesServeTheNextLayer:KdaChunk.StateCarriedAcrossCallsEqualsOnePass:KdaChunk.SeveralPassesMatch' \
  >"$out/memcheck.log" 2>&1
echo "memcheck rc=$?" >>"$out/memcheck.log"
tail -4 "$out/memcheck.log"
echo "== ncu: the intra and state kernels once (T=16K H32, 3xTF32, output in the state kernel)"
ncu_bin=$(command -v ncu || find /usr/local/cuda/bin /opt/nvidia -name ncu -type f 2>/dev/null | head -1)
if [ -n "$ncu_bin" ]; then
  timeout 45 "$ncu_bin" -k 'regex:intra_kernel|state_kernel' -c 2 --section SpeedOfLight --section WarpStateStats \
    --section LaunchStats --section Occupancy "$here/bin/kda_chunk_bench" 16384 32 32 1 2 1 >"$out/ncu.log" 2>&1
  echo "ncu rc=$?" >>"$out/ncu.log"
  grep -E "intra_kernel|state_kernel|Duration|Throughput|Stall|Warp Cycles|Issued|Achieved Occupancy|Registers|Block Limit|rc=" "$out/ncu.log" | head -60
else
  echo "no ncu on this machine"
fi
wait "$side"
echo "== fla anchor (GPU 1)"
tail -20 "$out/fla.log"
echo "== forward tests (GPU 1)"
grep -E "^\[  (PASSED|FAILED) |Failure|error [0-9]|Expected|Which is|rc=" "$out/forward.log" | head -30
