#!/usr/bin/env bash
# One call on the H200 device machine: build the CUDA kernel tests and kernels_bench there,
# run every kernel test binary, each under compute-sanitizer memcheck (and the MoE permute
# under racecheck), then the benchmark. Logs go to ${OUT:-/tmp/kernels-run}.
#   bash kernels/bench/run_h200.sh [PREBUILT_DIR]
# PREBUILT_DIR holds the same binaries built elsewhere (they need only libcudart.so.13);
# they are used when this machine cannot configure the project (missing -dev packages).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/kernels-run}
mkdir -p "$OUT"
PRE=${1:-}
BINS=(kernels_test moe_kernels_test transfer_kernels_test)
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh /usr/local/cuda/lib64
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  nvcc --version | tail -2
  nproc
} >"$OUT/env.log" 2>&1
BIN=""
start=$(date +%s)
if timeout 120 cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDSERVE_CUDA=ON >"$OUT/build.log" 2>&1 &&
   timeout 300 cmake --build build-h200 -j16 --target "${BINS[@]}" kernels_bench >>"$OUT/build.log" 2>&1; then
  BIN=build-h200/kernels
  echo "built on this machine in $(( $(date +%s) - start )) s" | tee -a "$OUT/env.log"
elif [ -n "$PRE" ]; then
  BIN=$PRE
  echo "could not build here (build.log); using the prebuilt binaries in $PRE" | tee -a "$OUT/env.log"
else
  echo "build failed and no prebuilt binaries"; tail -30 "$OUT/build.log"; exit 1
fi
fail=0
for b in "${BINS[@]}"; do
  echo "=== $b" >>"$OUT/tests.log"
  timeout 150 "$BIN/$b" >>"$OUT/tests.log" 2>&1 || { echo "FAILED: $b rc=$?"; fail=1; }
done
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED TEST|normalised error|^=== " "$OUT/tests.log"
for b in "${BINS[@]}"; do
  echo "=== memcheck $b" >>"$OUT/memcheck.log"
  timeout 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$BIN/$b" >>"$OUT/memcheck.log" 2>&1
  echo "memcheck $b rc=$?" | tee -a "$OUT/memcheck.log"
done
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/moe_kernels_test" --gtest_filter='Moe.Permute*' \
  >>"$OUT/memcheck.log" 2>&1
echo "racecheck moe permute rc=$?" | tee -a "$OUT/memcheck.log"
grep -E "ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log"
timeout 200 "$BIN/kernels_bench" 2>&1 | tee "$OUT/bench.log"
exit $fail
