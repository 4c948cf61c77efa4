#!/usr/bin/env bash
# One H200: FlashInfer's MLA decode (the issue-12 anchor, kernels/bench/mla_decode_flashinfer.py)
# and ours (mla_decode_bench m17) in one call. From the checkout root, with OUT set:
#   HERE  the folder holding fi_pkg.tar.xz (FlashInfer's Python package; its __init__ trimmed to
#         import only `jit`), prebuilt.tar.xz (its MLA JIT modules, built on the dev VM with nvcc
#         13.0 for sm_90a), apache_tvm_ffi-*.whl (cp312: FlashInfer's binding layer), and
#         bins.tar.xz (stripped mla_decode_bench, lib/ beside it). docs/perf.md, "FlashInfer's MLA decode".
#   SRC   the path the binaries were built under
set -uo pipefail
here=${HERE:-.dev/fi}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/apache_tvm_ffi-*.whl || exit 1
mkdir -p /tmp/fi /tmp/v && tar -C /tmp/fi -xJf "$here/fi_pkg.tar.xz" && tar -C /tmp/fi -xJf "$here/prebuilt.tar.xz" &&
  tar -C /tmp/v -xJf "$here/bins.tar.xz" || exit 1
source kernels/bench/h200_env.sh /tmp/v/bin/lib "${SRC:-/work/main}"
export PYTHONPATH=/tmp/fi:/tmp/site PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=/tmp/fiws
date -u
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
for backend in fa3 fa2; do
  echo "== FlashInfer $backend"
  timeout 240 python3 kernels/bench/mla_decode_flashinfer.py --prebuilt /tmp/fi/prebuilt --backend "$backend" >"$OUT/fi_$backend.log" 2>&1
  echo "rc=$?"
  grep -vE "^\s*$" "$OUT/fi_$backend.log" | tail -16
done
echo "== mla_decode_bench m17"
timeout 180 /tmp/v/bin/mla_decode_bench m17 >"$OUT/mla_m17.log" 2>&1
echo "rc=$?"
grep -E "^\|" "$OUT/mla_m17.log" | head -16
date -u
