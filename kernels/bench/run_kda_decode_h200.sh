#!/usr/bin/env bash
# One device run (nvidia-h200-x2) for the fused KDA decode step (docs/perf.md). GPU 0: the
# differential tests, the backend tests (forward, ops, decode graphs vs eager) and our
# graph-replay benchmark at batch 1..256 (every plan) plus fla's fused recurrent step as the
# anchor; GPU 1 meanwhile: compute-sanitizer memcheck on the whole kda_decode_kernels_test, then
# (NCU=1) ncu's occupancy and memory sections on the stream plan at batch 256. Run from the
# checkout root with this folder (binaries under bin/, libraries under lib/) carried, and the
# wheels in .whl/ (or under this folder's whl/):
#   OUT=dir bash .dev/kdadec3/run_kda_decode_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kda_decode_out}
mkdir -p "$out"
# The golden-fixture tests look under the source path the binaries were built from (linked here).
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-kdadec3
chmod +x "$here"/bin/* 2>/dev/null
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
test_bin="$here/bin/kda_decode_kernels_test"
(
  timeout 110 env CUDA_VISIBLE_DEVICES=1 compute-sanitizer --tool memcheck --error-exitcode 9 "$test_bin" >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?" >>"$out/memcheck.log"
  if [ "${NCU:-0}" = 1 ]; then
    timeout 40 env CUDA_VISIBLE_DEVICES=1 ncu --clock-control none --section Occupancy --section MemoryWorkloadAnalysis \
      --section SpeedOfLight --section LaunchStats --kernel-name regex:kda_decode --launch-skip 20 --launch-count 1 \
      "$here/bin/kda_decode_bench" 3 256 "${NCU_VARIANT:-stream/4x4x4}" >"$out/ncu.log" 2>&1
    echo "ncu rc=$?" >>"$out/ncu.log"
  fi
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
echo "== tests (GPU 0)"
timeout 90 "$test_bin" >"$out/test.log" 2>&1; echo "kda_decode_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure|error:" "$out/test.log" | head -20
timeout 60 "$here/bin/cuda_forward_test" >"$out/forward.log" 2>&1; echo "cuda_forward_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |Failure|graphs captured|Expected|Which is" "$out/forward.log" | head -20
echo "== bench (ours)"
timeout 60 "$here/bin/kda_decode_bench" >"$out/bench.log" 2>&1; echo "bench rc=$?"
if [ "${FLA:-1}" = 1 ]; then
  echo "== fla anchor"
  whl=.whl; [ -d "$here/whl" ] && whl="$here/whl"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$whl"/*.whl
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 50 python3 "$here/kda_decode_fla.py" >"$out/fla.log" 2>&1; echo "fla rc=$?"
  tail -10 "$out/fla.log"
fi
wait "$side"
echo "== compute-sanitizer"
tail -3 "$out/memcheck.log"
[ -f "$out/ncu.log" ] && grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Waves Per SM|Grid Size|L2 Hit|ncu rc" "$out/ncu.log" | head -30
echo "== bench"
grep -E "ceiling|empty|auto =" "$out/bench.log"
awk '$1 ~ /^[0-9]+$/' "$out/bench.log" | sort -k1,1n -k3,3n | awk '{n[$1]++} n[$1] <= 6'
