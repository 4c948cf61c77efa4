#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031  # the GPU 1 subshell sets its own CUDA_VISIBLE_DEVICES on purpose
# One device call (nvidia-h200-x2, under 120 s) for both decode kernels (docs/perf.md, the
# "fourth version" parts of "MLA split-KV latent decode" and "KDA fused decode step").
# GPU 0: the two differential tests, mla_decode_bench (every loader / launch option side by
# side, no old kernel), kda_decode_bench (every plan, with and without programmatic launches),
# then compute-sanitizer memcheck of both tests (small cases). GPU 1 meanwhile:
# cuda_forward_test (if carried), fla's fused recurrent KDA step (wheels under whl/), then the
# torch MLA anchor. Run from the checkout root with this folder (bin/, lib/, whl/, the two
# anchor scripts) carried:
#   OUT=dir bash .dev/dec4/run_decode_dec4_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/dec4_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-dec4
chmod +x "$here"/bin/* 2>/dev/null
# The golden-fixture tests look under the source path the binaries were built from.
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
(
  export CUDA_VISIBLE_DEVICES=1
  if [ -x "$here/bin/cuda_forward_test" ]; then  # the backend's decode steps over both kernels (pdl_decode on)
    timeout 45 "$here/bin/cuda_forward_test" >"$out/forward.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/forward.log"
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/whl/*.whl
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 40 python3 "$here/kda_decode_fla.py" >"$out/fla.log" 2>&1; echo "fla rc=$?" >>"$out/fla.log"
  [ "${TORCH:-1}" = 1 ] && { PYTHONUNBUFFERED=1 timeout 35 python3 "$here/mla_decode_torch.py" focus >"$out/torch.log" 2>&1; echo "torch rc=$?" >>"$out/torch.log"; }
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
timeout 20 "$here/bin/mla_decode_test" >"$out/tests.log" 2>&1; echo "mla_decode_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/tests.log" | head -8
timeout "${KDA_TEST_S:-55}" "$here/bin/kda_decode_kernels_test" >>"$out/tests.log" 2>&1; echo "kda_decode_kernels_test rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/tests.log" | tail -n +2 | head -8
read -ra mla_args <<<"${MLA_ARGS:-focus noold}"
timeout 35 "$here/bin/mla_decode_bench" "${mla_args[@]}" >"$out/mla_bench.log" 2>&1; echo "mla bench rc=$?"
timeout 20 "$here/bin/kda_decode_bench" >"$out/kda_bench.log" 2>&1; echo "kda bench rc=$?"
# memcheck on the small cases (GPU 0, after the timings), both tests at once
timeout 28 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
  --gtest_filter='*GraphLaunch*:*NegativePage*:*TinyModel*:*WarpVariantRefuses*' >"$out/memcheck_mla.log" 2>&1 &
mc=$!
timeout 28 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_decode_kernels_test" \
  --gtest_filter='*ProgrammaticLaunchChain*' >"$out/memcheck_kda.log" 2>&1; echo "memcheck kda rc=$?" >>"$out/memcheck_kda.log"
wait $mc; echo "memcheck mla rc=$?" >>"$out/memcheck_mla.log"
wait "$side"
echo "== memcheck"; tail -n 2 "$out/memcheck_mla.log" "$out/memcheck_kda.log"
[ -f "$out/forward.log" ] && { echo "== cuda_forward_test (GPU 1)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|rc=" "$out/forward.log" | head; }
echo "== mla"; grep -E "ceiling|^options|^\| +3 " "$out/mla_bench.log" | cut -c1-150
echo "== kda"; grep -E "ceiling|empty" "$out/kda_bench.log"
awk '$1 ~ /^(64|128|256)$/ && ($2 ~ /auto|stream|^s\//)' "$out/kda_bench.log"
awk '$1 ~ /^(1|3|8|16|32)$/ && ($2 ~ /auto/)' "$out/kda_bench.log"
echo "== fla"; tail -9 "$out/fla.log"
echo "== torch"; tail -4 "$out/torch.log" 2>/dev/null
