#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031  # the GPU 1 subshell sets its own CUDA_VISIBLE_DEVICES on purpose
# One device call (nvidia-h200-x2, under 150 s) for branch mladec10 (docs/perf.md, "MLA split-KV
# latent decode ... Tenth version"). GPU 1: mla_decode_test, compute-sanitizer memcheck of it
# (the whole binary in three parts), racecheck of the tiny models and of a K3 case (the lean and
# prefetch kernels), cuda_forward_test (if carried), all at once. GPU 0 meanwhile:
# mla_decode_bench pf (read ceiling; kLean = the ninth version's default against kLeanAhead at
# three leads and kLeanPrefetch, kLean's and kLeanAhead's run alone, graphs; one launch), then
# (if time is left) mla_decode_bench focus noold (the defaults as the plan picks them). Run from
# the checkout root with this folder (bin/, lib/) carried:
#   OUT=dir bash .dev/mladec10/run_mla_decode10_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mladec10_out}
out=$top/logs  # tarred at the end (a device call brings back at most 8 files)
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-mladec10
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-130}
gpus=$(nvidia-smi -L | wc -l)
side_gpu=$((gpus > 1 ? 1 : 0))
mc() {  # memcheck of one part of mla_decode_test: log name, filter
  { timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" --gtest_filter="$2" \
    >"$out/$1.log" 2>&1; echo "memcheck $1 rc=$?" >>"$out/$1.log"; } &
}
rc() {  # racecheck of one part
  { timeout "$t" compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/mla_decode_test" --gtest_filter="$2" \
    >"$out/$1.log" 2>&1; echo "racecheck $1 rc=$?" >>"$out/$1.log"; } &
}
(
  export CUDA_VISIBLE_DEVICES=$side_gpu
  { timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
  mc m1 '*GraphLaunch*:*NegativePage*:*TinyModel*:*WarpVariantRefuses*:*ManyRows*:MlaDecodePlan*:MlaDecodeShapes*'
  mc m2 '*RaggedRowsMatch*'
  mc m3 '*RaggedRowsManyHeads*:*LongSingleRow*'
  rc r1 '*TinyModel*'
  rc r2 '*NegativePage*'  # 3 heads, K3 widths: the lean and prefetch kernels run under it
  if [ -x "$here/bin/cuda_forward_test" ]; then
    { timeout "$t" "$here/bin/cuda_forward_test" >"$out/t_fwd.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/t_fwd.log"; } &
  fi
  wait
) &
side=$!
[ "$gpus" -gt 1 ] || wait "$side"
export CUDA_VISIBLE_DEVICES=0
timeout "${BENCH_S:-80}" "$here/bin/mla_decode_bench" pf >"$out/b_pf.log" 2>&1; echo "pf bench rc=$?" >>"$out/b_pf.log"
if [ -n "${FOCUS_S:-}" ]; then
  timeout "$FOCUS_S" "$here/bin/mla_decode_bench" focus noold >"$out/b_focus.log" 2>&1; echo "focus bench rc=$?" >>"$out/b_focus.log"
fi
wait "$side"
for f in t_mla t_fwd; do
  [ -f "$out/$f.log" ] || continue
  echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/$f.log" | head -12
done
echo "== memcheck, racecheck"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$out"/m?.log "$out"/r?.log | head -30
echo "== pf bench"; cat "$out/b_pf.log"
[ -f "$out/b_focus.log" ] && { echo "== focus bench"; grep -vE "^\|---" "$out/b_focus.log" | cut -c1-200; }
cp "$out"/b_*.log "$top"/ 2>/dev/null
tar czf "$top/logs.tgz" -C "$out" . && rm -rf "$out"
date -u
