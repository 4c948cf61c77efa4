#!/usr/bin/env bash
# One H200: the bf16 MLA decode on tensor cores (seventeenth version, mla_decode_mma_sm90.cu).
# mla_decode_test (every case; the tensor-core form's largest error printed), compute-sanitizer
# memcheck and racecheck of its small case, mla_decode_bench m17, the CUDA backend's bf16 tests
# (cuda_forward_test, the tensor-core form is its default on a bf16 cache) and decode_bench fp32 vs
# bf16 on tiny-k3-mla512. From the checkout root, with OUT set:
#   HERE  the folder holding bins.tar.xz (stripped binaries, lib/ beside them)
#   SRC   the path the binaries were built under (tests read tests/fixtures there)
set -uo pipefail
here=${HERE:-.dev/mlatc}
mkdir -p /tmp/v && tar -C /tmp/v -xJf "$here/bins.tar.xz"
BIN=/tmp/v/bin
exec > >(tee -a "$OUT/summary.log") 2>&1
source kernels/bench/h200_env.sh "$BIN/lib" "${SRC:-/work/main}"
chmod +x "$BIN"/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
s=$(date +%s)
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/mla_decode_test" --gtest_filter='MlaDecodeBf16.SmallCase' \
  >/tmp/san_mem.log 2>&1 &
M=$!
timeout 170 "$BIN/mla_decode_test" >/tmp/test_mla.log 2>&1
echo "mla_decode_test rc=$? $(grep -cE '^\[       OK' /tmp/test_mla.log) ok, $(grep -cE '^\[  FAILED' /tmp/test_mla.log) failed, $(( $(date +%s) - s )) s"
grep -E "^\[  FAILED|Failure|Expected|Which is|tensor cores" /tmp/test_mla.log | head -24
wait $M
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' /tmp/san_mem.log | head -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/san_mem.log | tr '\n' ' ')"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/mla_decode_test" --gtest_filter='MlaDecodeBf16.SmallCase' \
  >/tmp/san_race.log 2>&1 &
R=$!
timeout 120 "$BIN/cuda_forward_test" --gtest_filter='*Bf16*' >/tmp/test_fwd.log 2>&1
echo "cuda_forward_test *Bf16* rc=$? $(grep -cE '^\[       OK' /tmp/test_fwd.log) ok, $(grep -cE '^\[  FAILED' /tmp/test_fwd.log) failed"
grep -E "^\[  FAILED|Failure|Expected|Which is|bf16 cache|bf16 MLA cache" /tmp/test_fwd.log | head -16
wait $R
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' /tmp/san_race.log | head -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/san_race.log | tr '\n' ' ')"
echo "== mla_decode_bench m17"
timeout 150 "$BIN/mla_decode_bench" m17 >"$OUT/mla_m17.log" 2>&1; echo "rc=$?"; cat "$OUT/mla_m17.log"
echo "== decode_bench fp32 vs bf16 (tiny-k3-mla512, graphs)"
timeout 60 "$BIN/decode_bench" --preset tiny-k3-mla512 --kv-cache-dtype compare --ctx 4096 --steps 100 --batches 8 >"$OUT/bench_4k.log" 2>&1
echo "8 x 4K rc=$?"; tail -8 "$OUT/bench_4k.log"
timeout 60 "$BIN/decode_bench" --preset tiny-k3-mla512 --kv-cache-dtype compare --ctx 16384 --steps 100 --batches 1 >"$OUT/bench_16k.log" 2>&1
echo "1 x 16K rc=$?"; tail -8 "$OUT/bench_16k.log"
for f in /tmp/test_*.log /tmp/san_*.log; do echo "=== $f"; tail -40 "$f"; done >"$OUT/logs.txt"
date -u
