#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031  # the GPU 1 subshell sets its own CUDA_VISIBLE_DEVICES on purpose
# One device call (nvidia-h200-x2, under 150 s) for branch mladec8 (docs/perf.md, "MLA split-KV
# latent decode ... Eighth version"). GPU 1: mla_decode_test, compute-sanitizer memcheck of it
# (the whole binary in two halves), racecheck of the tiny models and of a K3 case, cuda_forward_test (if carried),
# all at once. GPU 0 meanwhile: mla_decode_bench ring (read ceiling, then the shallow, lean and
# deep rings side by side: old (kShallow / kDeep) vs new (kLean) at the small-batch and
# long-context shapes), then (if time is left) mla_decode_bench focus noold. Run from the
# checkout root with this folder (bin/, lib/) carried:
#   OUT=dir bash .dev/mladec8/run_mla_decode8_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mladec8_out}
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-mladec8
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-130}
gpus=$(nvidia-smi -L | wc -l)
side_gpu=$((gpus > 1 ? 1 : 0))
(
  export CUDA_VISIBLE_DEVICES=$side_gpu
  { timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
  { timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter="${MEMCHECK_FILTER:-*GraphLaunch*:*NegativePage*:*TinyModel*:*WarpVariantRefuses*:*ManyRows*:MlaDecodePlan*:MlaDecodeShapes*}" \
    >"$out/m_mla.log" 2>&1; echo "memcheck mla rc=$?" >>"$out/m_mla.log"; } &
  { timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter="${MEMCHECK_FILTER2:-*RaggedRows*:*LongSingleRow*}" >"$out/m_mla2.log" 2>&1; echo "memcheck mla (2) rc=$?" >>"$out/m_mla2.log"; } &
  { timeout "$t" compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*TinyModel*' >"$out/r_mla.log" 2>&1; echo "racecheck mla rc=$?" >>"$out/r_mla.log"; } &
  # The lean kernel takes K3's widths only: racecheck it on the smallest such case.
  { timeout "$t" compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*NegativePage*' >"$out/r_mla2.log" 2>&1; echo "racecheck mla (2) rc=$?" >>"$out/r_mla2.log"; } &
  if [ -x "$here/bin/cuda_forward_test" ]; then
    { timeout "$t" "$here/bin/cuda_forward_test" >"$out/t_fwd.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/t_fwd.log"; } &
  fi
  wait
) &
side=$!
[ "$gpus" -gt 1 ] || wait "$side"
export CUDA_VISIBLE_DEVICES=0
timeout "${BENCH_S:-110}" "$here/bin/mla_decode_bench" ring >"$out/b_ring.log" 2>&1; echo "ring bench rc=$?" >>"$out/b_ring.log"
if [ -n "${FOCUS_S:-}" ]; then
  timeout "$FOCUS_S" "$here/bin/mla_decode_bench" focus noold >"$out/b_focus.log" 2>&1; echo "focus bench rc=$?" >>"$out/b_focus.log"
fi
wait "$side"
for f in t_mla t_fwd; do
  [ -f "$out/$f.log" ] || continue
  echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/$f.log" | head -12
done
echo "== memcheck, racecheck"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$out/m_mla.log" "$out/m_mla2.log" "$out/r_mla.log" "$out/r_mla2.log" | head -24
echo "== ring bench"; cat "$out/b_ring.log"
[ -f "$out/b_focus.log" ] && { echo "== focus bench"; grep -vE "^\|---" "$out/b_focus.log" | cut -c1-230; }
date -u
