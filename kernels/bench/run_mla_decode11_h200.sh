#!/usr/bin/env bash
# One device call (nvidia-h200, under 150 s) for branch mladec11 (docs/perf.md, "MLA split-KV
# latent decode ... Eleventh version"): mla_decode_test, then mla_decode_bench timeline (per-CTA
# stamps of the run and the merge over graphs of back-to-back steps at 1 x 1K, 1 x 16K, 1 x 64K,
# 8 x 64K). Sequential on the one GPU, so the test does not disturb the timings. Run from the
# checkout root with this folder (bin/, lib/) carried:
#   OUT=dir bash .dev/mladec11/run_mla_decode11_h200.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=${OUT:-/tmp/mladec11_out}
mkdir -p "$top"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib" /work/wt-mladec11
chmod +x "$here"/bin/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout "${TEST_S:-60}" "$here/bin/mla_decode_test" >"$top/t_mla.log" 2>&1; echo "mla_decode_test rc=$?" >>"$top/t_mla.log"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=|tests ran" "$top/t_mla.log" | head -12
timeout "${BENCH_S:-80}" "$here/bin/mla_decode_bench" timeline >"$top/b_timeline.log" 2>&1; echo "timeline bench rc=$?" >>"$top/b_timeline.log"
cat "$top/b_timeline.log"
date -u
