#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031  # the GPU 1 subshell sets its own CUDA_VISIBLE_DEVICES on purpose
# One device call (nvidia-h200-x2, under 150 s) for branch mladec6 (docs/perf.md, "MLA split-KV
# latent decode ... Sixth version"). GPU 1: mla_decode_test, compute-sanitizer memcheck of it
# (the whole binary in two halves), racecheck of two cases, cuda_forward_test, all at once. GPU 0 meanwhile:
# mla_decode_bench (MLA_ARGS, default "focus noold": read ceiling, the options table and the
# main columns at the 3-head shapes), then the torch anchor (same shapes). Run from the
# checkout root with this folder (bin/, lib/, mla_decode_torch.py) carried:
#   OUT=dir bash .dev/mladec6/run_mla_decode6_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mladec6_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-mladec6
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-120}
# Two GPUs: the tests on GPU 1 while GPU 0 benches. One GPU (the one-GPU kind): tests first.
gpus=$(nvidia-smi -L | wc -l)
side_gpu=$((gpus > 1 ? 1 : 0))
(
  export CUDA_VISIBLE_DEVICES=$side_gpu
  { timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
  # memcheck of the whole binary in two parallel halves; racecheck (shared memory) on two cases
  { timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter="${MEMCHECK_FILTER:-*GraphLaunch*:*NegativePage*:*TinyModel*:*WarpVariantRefuses*:*ManyRows*:MlaDecodePlan*:MlaDecodeShapes*}" \
    >"$out/m_mla.log" 2>&1; echo "memcheck mla rc=$?" >>"$out/m_mla.log"; } &
  { timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter="${MEMCHECK_FILTER2:-*RaggedRows*:*LongSingleRow*}" >"$out/m_mla2.log" 2>&1; echo "memcheck mla (2) rc=$?" >>"$out/m_mla2.log"; } &
  { timeout "$t" compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*GraphLaunch*:*TinyModel*' >"$out/r_mla.log" 2>&1; echo "racecheck mla rc=$?" >>"$out/r_mla.log"; } &
  { timeout "$t" "$here/bin/cuda_forward_test" >"$out/t_fwd.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/t_fwd.log"; } &
  wait
) &
side=$!
[ "$gpus" -gt 1 ] || wait "$side"
export CUDA_VISIBLE_DEVICES=0
# shellcheck disable=SC2086  # MLA_ARGS is a word list on purpose
timeout "${BENCH_S:-95}" "$here/bin/mla_decode_bench" ${MLA_ARGS:-focus noold} >"$out/b_mla.log" 2>&1; echo "mla bench rc=$?" >>"$out/b_mla.log"
timeout "${TORCH_S:-35}" python3 "$here/mla_decode_torch.py" focus >"$out/torch.log" 2>&1; echo "torch rc=$?" >>"$out/torch.log"
wait "$side"
for f in t_mla t_fwd; do
  echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/$f.log" | head -12
done
echo "== memcheck, racecheck"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$out/m_mla.log" "$out/m_mla2.log" "$out/r_mla.log" | head -20
echo "== mla bench"; grep -vE "^\|---" "$out/b_mla.log" | cut -c1-260
echo "== torch"; cat "$out/torch.log"
date -u
