#!/usr/bin/env bash
# One device call (nvidia-h200, under 200 s) for branch mladec13 (docs/perf.md, MLA decode,
# thirteenth version): mla_decode_test whole, then compute-sanitizer memcheck and racecheck of
# the cluster-form cases (in parallel, before any timing), then the m13 table (the cluster form
# against the twelfth version's pick, and the launch floors, interleaved rounds in one process).
#   OUT=dir bash .dev/mladec13/run_mla_decode13_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mladec13_out}
out=$top/logs
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-60}
{ timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
{ timeout "${SAN_S:-100}" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*Cluster*' >"$out/mem.log" 2>&1; echo "memcheck rc=$?" >>"$out/mem.log"; } &
{ timeout "${SAN_S:-100}" compute-sanitizer --tool racecheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*ClusterSmall*' >"$out/race.log" 2>&1; echo "racecheck rc=$?" >>"$out/race.log"; } &
wait
date -u
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/t_mla.log" | head -20
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=|PASSED|FAILED" "$out"/mem.log "$out"/race.log | head -12
# Twice, in two processes (run-to-run spread).
for k in 1 2; do
  timeout "${M13_S:-40}" "$here/bin/mla_decode_bench" m13 >"$out/b_m13_$k.log" 2>&1; echo "m13 rc=$?" >>"$out/b_m13_$k.log"
  echo "== m13 ($k)"; grep -E "^m13|rc=" "$out/b_m13_$k.log"
done
cp "$out"/b_m13_1.log "$out"/b_m13_2.log "$top"/ 2>/dev/null
tar czf "$top/logs.tgz" -C "$out" . && rm -rf "$out"
date -u
