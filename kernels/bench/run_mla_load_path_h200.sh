#!/usr/bin/env bash
# One H200: the MLA decode's load path (eighteenth session, docs/perf.md "The load path alone").
# mla_decode_test and cuda_forward_test's bf16 cases, `mla_decode_bench m18` (copy-only kernels over
# the run's pages beside the runs), `m17`, and FlashInfer's fa3 MLA decode in the same call when its
# artifacts are there. From the checkout root, with OUT set:
#   HERE     the folder holding bins.tar.xz (stripped mla_decode_test, cuda_forward_test,
#            mla_decode_bench; lib/ beside them)
#   FI_HERE  optional: tools/kernels/pack_flashinfer_anchor.sh's output (fi_pkg.tar.xz,
#            prebuilt.tar.xz, the apache-tvm-ffi wheel)
#   SRC      the path the binaries were built under
set -uo pipefail
here=${HERE:-.dev/fin18}
mkdir -p /tmp/v && tar -C /tmp/v -xJf "$here/bins.tar.xz" || exit 1
source kernels/bench/h200_env.sh /tmp/v/bin/lib "${SRC:-/work/main}"
B=/tmp/v/bin
exec > >(tee -a "$OUT/summary.log") 2>&1
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
timeout 100 "$B/cuda_forward_test" --gtest_filter='*Bf16*' >/tmp/fwd.log 2>&1 &
F=$!
timeout 150 "$B/mla_decode_test" >/tmp/test.log 2>&1
echo "mla_decode_test rc=$? $(grep -cE '^\[       OK' /tmp/test.log) ok, $(grep -cE '^\[  FAILED' /tmp/test.log) failed"
grep -E '^\[  FAILED|tensor cores \]' /tmp/test.log | head
wait $F
echo "cuda_forward_test *Bf16* rc=$? $(grep -cE '^\[       OK' /tmp/fwd.log) ok, $(grep -cE '^\[  FAILED' /tmp/fwd.log) failed"
echo "== mla_decode_bench m18"
timeout 150 "$B/mla_decode_bench" m18 >"$OUT/m18.log" 2>&1
echo "rc=$?"
cat "$OUT/m18.log"
if [ -n "${FI_HERE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$FI_HERE"/apache_tvm_ffi-*.whl &&
    mkdir -p /tmp/fi && tar -C /tmp/fi -xJf "$FI_HERE/fi_pkg.tar.xz" && tar -C /tmp/fi -xJf "$FI_HERE/prebuilt.tar.xz" || exit 1
  echo "== FlashInfer fa3"
  PYTHONPATH=/tmp/fi:/tmp/site PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=/tmp/fiws timeout 150 python3 kernels/bench/mla_decode_flashinfer.py \
    --prebuilt /tmp/fi/prebuilt --backend fa3 --shapes 1x1024,8x16384,32x16384,64x4096,128x16384,256x16384 >"$OUT/fi_fa3.log" 2>&1
  echo "rc=$?"
  grep -vE '^\s*$' "$OUT/fi_fa3.log" | tail -12
fi
echo "== mla_decode_bench m17"
timeout 100 "$B/mla_decode_bench" m17 >"$OUT/m17.log" 2>&1
echo "rc=$?"
grep -E '^\|' "$OUT/m17.log"
date -u
