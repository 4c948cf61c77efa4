#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031  # the GPU 1 subshell sets its own CUDA_VISIBLE_DEVICES on purpose
# One device call (nvidia-h200-x2, under 150 s) for branch mladec9 (docs/perf.md, "MLA split-KV
# latent decode ... Ninth version"). GPU 1: mla_decode_test, compute-sanitizer memcheck of it
# (the whole binary in three parts), racecheck of the tiny models and of a K3 case (the lean and
# burst kernels), cuda_forward_test (if carried), all at once. GPU 0 meanwhile:
# mla_decode_bench ring (read ceiling; the lean ring with the eighth version's chained merge,
# the early-load merge, the fused merge; the burst ring; the run alone; the copy ring alone),
# then (if time is left) main's bench before the change (old/, focus noold). Run from the
# checkout root with this folder (bin/, old/, lib/) carried:
#   OUT=dir bash .dev/mladec9/run_mla_decode9_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mladec9_out}
out=$top/logs  # tarred at the end (a device call brings back at most 8 files)
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-mladec9
chmod +x "$here"/bin/* "$here"/old/* 2>/dev/null
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
  rc r2 '*NegativePage*'  # 3 heads, K3 widths: the lean and burst kernels run under it
  if [ -x "$here/bin/cuda_forward_test" ]; then
    { timeout "$t" "$here/bin/cuda_forward_test" >"$out/t_fwd.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/t_fwd.log"; } &
  fi
  wait
) &
side=$!
[ "$gpus" -gt 1 ] || wait "$side"
export CUDA_VISIBLE_DEVICES=0
timeout "${BENCH_S:-85}" "$here/bin/mla_decode_bench" ring >"$out/b_ring.log" 2>&1; echo "ring bench rc=$?" >>"$out/b_ring.log"
if [ -n "${OLD_S:-}" ] && [ -x "$here/old/mla_decode_bench" ]; then
  timeout "$OLD_S" "$here/old/mla_decode_bench" focus noold >"$out/b_old.log" 2>&1; echo "old focus bench rc=$?" >>"$out/b_old.log"
fi
wait "$side"
for f in t_mla t_fwd; do
  [ -f "$out/$f.log" ] || continue
  echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/$f.log" | head -12
done
echo "== memcheck, racecheck"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$out"/m?.log "$out"/r?.log | head -30
echo "== ring bench"; cat "$out/b_ring.log"
[ -f "$out/b_old.log" ] && { echo "== old focus bench"; grep -vE "^\|---" "$out/b_old.log" | cut -c1-200; }
cp "$out"/b_*.log "$top"/ 2>/dev/null
tar czf "$top/logs.tgz" -C "$out" . && rm -rf "$out"
date -u
