#!/usr/bin/env bash
# One device call (nvidia-h200, under 150 s) for branch mladec12 (docs/perf.md, MLA decode,
# twelfth version): mla_decode_test whole and compute-sanitizer memcheck of the cases that run
# the narrow merge slices (in parallel, before any timing), then sequentially: main's bench
# (old/, timeline: the eleventh default's plain graph us at 1 x 1K / 16K / 64K, 8 x 64K),
# this branch's m12 table (old default vs slices vs early trigger vs new default, interleaved
# rounds in one process), main's timeline again, and this branch's timeline at 1 x 1K / 64K.
#   OUT=dir bash .dev/mladec12/run_mla_decode12_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mladec12_out}
out=$top/logs
mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/main
chmod +x "$here"/bin/* "$here"/old/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t=${TEST_S:-40}
{ timeout "$t" "$here/bin/mla_decode_test" >"$out/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$out/t_mla.log"; } &
{ timeout "$t" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/mla_decode_test" \
    --gtest_filter='*TinyModel*:*NegativePage*:*GraphLaunch*' >"$out/m1.log" 2>&1; echo "memcheck m1 rc=$?" >>"$out/m1.log"; } &
wait
date -u
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$out/t_mla.log" | head -12
grep -E "ERROR SUMMARY|rc=|PASSED|FAILED" "$out"/m?.log | head -12
timeout "${OLD_S:-25}" "$here/old/mla_decode_bench" timeline >"$out/b_old1.log" 2>&1; echo "old timeline rc=$?" >>"$out/b_old1.log"
timeout "${M12_S:-45}" "$here/bin/mla_decode_bench" m12 >"$out/b_m12.log" 2>&1; echo "m12 rc=$?" >>"$out/b_m12.log"
timeout "${NEW_TL_S:-20}" "$here/bin/mla_decode_bench" timeline short >"$out/b_tl.log" 2>&1; echo "new timeline rc=$?" >>"$out/b_tl.log"
echo "== m12"; cat "$out/b_m12.log"
echo "== old timeline (plain)"; grep -iE "x .*items|plain|rc=" "$out/b_old1.log" | cut -c1-220 | head -30
cp "$out"/b_m12.log "$out"/b_tl.log "$out"/b_old1.log "$top"/ 2>/dev/null
tar czf "$top/logs.tgz" -C "$out" . && rm -rf "$out"
date -u
