#!/usr/bin/env bash
# One device call (nvidia-h200, under 200 s) for branch mladec15 (docs/perf.md, MLA decode,
# fifteenth version): mla_decode_test whole, with compute-sanitizer memcheck of the early-ring
# cases (the late writer's test and the block-softmax small case, which runs the early rings)
# and racecheck of the small case in parallel (before any timing); then the disabled test that
# shows the late-writer test catching a newest token read before the wait; then the m15 table
# (the early forms against the fourteenth pick, with the 1 x 1K timelines), M15_N times.
#   OUT=dir bash run_mla_decode15_h200.sh   (binaries in ./bin, their libraries in ./bin/lib)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mladec15_out}
out=$top/logs
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/bin/lib" /work/main /work/wt-mladec15
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-100}
{ timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
{ timeout "${SAN_S:-100}" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*MlaDecodeEarly.Rings*:*BlockSoftmaxSmall*' >"$out/mem.log" 2>&1; echo "memcheck rc=$?" >>"$out/mem.log"; } &
{ timeout "${SAN_S:-100}" compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*BlockSoftmaxSmall*' >"$out/race.log" 2>&1; echo "racecheck rc=$?" >>"$out/race.log"; } &
wait
date -u
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/t_mla.log" | head -20
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$out"/mem.log "$out"/race.log | head -12
timeout 30 "$here/bin/mla_decode_test" --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_LoadOfTheNewest*' >"$out/t_neg.log" 2>&1
echo "negative (disabled) test rc=$? (0: every early-read newest token was caught)" >>"$out/t_neg.log"
grep -E "OK \]|FAILED|Failure|rc=|Expected|Which is" "$out/t_neg.log" | head -12
for k in $(seq 1 "${M15_N:-2}"); do
  timeout "${M15_S:-40}" "$here/bin/mla_decode_bench" m15 >"$out/b_m15_$k.log" 2>&1; echo "m15 rc=$?" >>"$out/b_m15_$k.log"
  echo "== m15 ($k)"; grep -E "^m15|rc=" "$out/b_m15_$k.log"
done
cp "$out"/b_m15_*.log "$out"/t_neg.log "$top"/ 2>/dev/null
tar czf "$top/logs.tgz" -C "$out" . && rm -rf "$out"
date -u
