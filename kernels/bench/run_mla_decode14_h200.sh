#!/usr/bin/env bash
# One device call (nvidia-h200, under 200 s) for branch mladec14 (docs/perf.md, MLA decode,
# fourteenth version): mla_decode_test whole, with compute-sanitizer memcheck of the
# block-softmax cases and racecheck of its small case in parallel (before any timing), then the
# m14 table (the block-softmax form against the thirteenth version's pick, and the floors, with
# the 1 x 1K timelines), twice, two processes.
#   OUT=dir bash .dev/mladec14/run_mla_decode14_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mladec14_out}
out=$top/logs
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main /work/wt-mladec14
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-90}
{ timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
{ timeout "${SAN_S:-90}" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*BlockSoftmax*' >"$out/mem.log" 2>&1; echo "memcheck rc=$?" >>"$out/mem.log"; } &
{ timeout "${SAN_S:-90}" compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*BlockSoftmaxSmall*' >"$out/race.log" 2>&1; echo "racecheck rc=$?" >>"$out/race.log"; } &
wait
date -u
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/t_mla.log" | head -20
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$out"/mem.log "$out"/race.log | head -12
for k in $(seq 1 "${M14_N:-2}"); do
  timeout "${M14_S:-40}" "$here/bin/mla_decode_bench" m14 >"$out/b_m14_$k.log" 2>&1; echo "m14 rc=$?" >>"$out/b_m14_$k.log"
  echo "== m14 ($k)"; grep -E "^m14|rc=" "$out/b_m14_$k.log"
done
cp "$out"/b_m14_1.log "$out"/b_m14_2.log "$top"/ 2>/dev/null
tar czf "$top/logs.tgz" -C "$out" . && rm -rf "$out"
date -u
