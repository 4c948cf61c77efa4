#!/usr/bin/env bash
# One device call (nvidia-h200, under 200 s) for branch mlaeng (docs/perf.md, "The early MLA
# ring in the engine"): cuda_forward_test, pd_device_test and mla_decode_test in parallel with
# compute-sanitizer memcheck of one new forward case; then decode_bench with early_mla_decode
# off and on (off, on, off, on) on tiny-k3-mla512 (the lean kernels' shapes) and tiny-k3 (latent
# 32: the generic fallback, where the option changes nothing: the control).
#   OUT=dir bash run_mlaeng_h200.sh   (binaries in ./bin, their libraries in ./bin/lib)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mlaeng_out}
out=$top/logs
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/bin/lib" /work/main /work/wt-mlaeng
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-80}
{ timeout "$t" "$here/bin/cuda_forward_test" >"$out/t_fwd.log" 2>&1; echo "cuda_forward_test rc=$?" >>"$out/t_fwd.log"; } &
{ timeout "$t" "$here/bin/pd_device_test" >"$out/t_pd.log" 2>&1; echo "pd_device_test rc=$?" >>"$out/t_pd.log"; } &
{ timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
{ timeout "${SAN_S:-70}" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/cuda_forward_test" \
    --gtest_filter="${SAN_FILTER:-Mla512/EarlyMlaForward.*/3}" >"$out/mem.log" 2>&1; echo "memcheck rc=$?" >>"$out/mem.log"; } &
wait
date -u
for f in t_fwd t_pd t_mla; do
  echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|early MLA|early ==|tests ran" "$out/$f.log" | head -24
done
grep -E "ERROR SUMMARY|rc=|PASSED|FAILED" "$out/mem.log" | head -8
bench() {  # name, timeout, decode_bench arguments
  local name=$1 s=$2
  shift 2
  timeout "$s" "$here/bin/decode_bench" "$@" >"$out/b_$name.log" 2>&1; echo "rc=$?" >>"$out/b_$name.log"
  echo "== decode_bench $*"; cat "$out/b_$name.log"
}
bench mla512_1k "${B1_S:-35}" --preset tiny-k3-mla512 --early-mla compare --ctx 1024 --steps 100 --batches 1,8,32
bench mla512_4k "${B2_S:-25}" --preset tiny-k3-mla512 --early-mla compare --ctx 4096 --steps 100 --batches 1,8
bench k3_128 "${B3_S:-15}" --preset tiny-k3 --early-mla compare --ctx 128 --steps 100 --batches 1,8
cp "$out"/b_*.log "$top"/ 2>/dev/null
tar czf "$top/logs.tgz" -C "$out" . && rm -rf "$out"
date -u
