#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031  # the GPU 1 subshell sets its own CUDA_VISIBLE_DEVICES on purpose
# One device call (nvidia-h200-x2, under 140 s) for branch dec5 (docs/perf.md, "MLA split-KV
# latent decode ... Fifth version"). GPU 1: every test binary of the decode paths at once,
# each with a generous limit (mla_decode_test; kda_decode_kernels_test in three parallel
# filters that together are the whole binary; cuda_forward_test) and compute-sanitizer
# memcheck on small cases. GPU 0 meanwhile, alone: mla_decode_bench tune (the plan's waves x
# programmatic launches off / early trigger / late trigger) after the read ceiling. Run from
# the checkout root with this folder (bin/, lib/) carried:
#   OUT=dir bash .dev/dec5/run_decode_dec5_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/dec5_out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TMPDIR=/tmp LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
chmod +x "$here"/bin/* 2>/dev/null
# The golden-fixture tests look under the source path the binaries were built from.
[ -e /work/wt-dec5 ] || { mkdir -p /work && ln -s "$PWD" /work/wt-dec5; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-115}
kda_a='*TpRankShapes*:*PushPlanSmall*:*PushPlanLarge*:*StreamPlan*:*ProgrammaticLaunchChain*'
kda_c='*OtherHeadCounts*:*EqualsCorrectFirst*:*RejectsWhat*'
(
  export CUDA_VISIBLE_DEVICES=1
  { timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
  { timeout "$t" "$here/bin/kda_decode_kernels_test" --gtest_filter="$kda_a" >"$out/t_kda_a.log" 2>&1; echo "kda a rc=$?" >>"$out/t_kda_a.log"; } &
  { timeout "$t" "$here/bin/kda_decode_kernels_test" --gtest_filter='*PaddingRowsEveryPlan*' >"$out/t_kda_b.log" 2>&1; echo "kda b rc=$?" >>"$out/t_kda_b.log"; } &
  { timeout "$t" "$here/bin/kda_decode_kernels_test" --gtest_filter="$kda_c" >"$out/t_kda_c.log" 2>&1; echo "kda c rc=$?" >>"$out/t_kda_c.log"; } &
  { timeout "$t" "$here/bin/cuda_forward_test" >"$out/t_fwd.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/t_fwd.log"; } &
  { timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*GraphLaunch*:*NegativePage*:*TinyModel*:*WarpVariantRefuses*' >"$out/m_mla.log" 2>&1; echo "memcheck mla rc=$?" >>"$out/m_mla.log"; } &
  { timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/kda_decode_kernels_test" \
    --gtest_filter='*ProgrammaticLaunchChain*:*RejectsWhat*' >"$out/m_kda.log" 2>&1; echo "memcheck kda rc=$?" >>"$out/m_kda.log"; } &
  wait
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
timeout "${BENCH_S:-110}" "$here/bin/mla_decode_bench" "${MLA_ARGS:-tune}" >"$out/b_mla.log" 2>&1; echo "mla bench rc=$?" >>"$out/b_mla.log"
wait "$side"
for f in t_mla t_kda_a t_kda_b t_kda_c t_fwd; do
  echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/$f.log" | head -12
done
echo "== memcheck"; grep -E "ERROR SUMMARY|rc=" "$out/m_mla.log" "$out/m_kda.log"
echo "== mla bench"; grep -E "ceiling|^tune|rc=" "$out/b_mla.log" | cut -c1-240
date -u
