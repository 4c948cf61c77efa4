#!/usr/bin/env bash
# kWgmmaTma160 device run (twenty-third session, docs/perf.md "Tails absorbed into the last token tile"):
# moe_prefill_test, moe_prefill_bench beside kWgmma (twice, queue and static), the torch anchors,
# cuda_forward_test (kAuto = kWgmmaTma160), memcheck of the five small cases. Nothing is built there.
#   OUT=dir bash .dev/X/run.sh   (this file, carried with bins.tar.xz: bin/ = moe_prefill_bench,
#   moe_prefill_test, cuda_forward_test, bin/lib/ = libcudart.so.13, libspdlog, libfmt, libpcre2-8)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
timeout 100 "$B"/moe_prefill_test > "$OUT"/test.log 2>&1; echo "test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|bit-identical" "$OUT"/test.log | head -20
grep -E "tma-160\]" "$OUT"/test.log | head -40
for _ in 1 2; do timeout 60 "$B"/moe_prefill_bench --kernels wgmma,wgmma-tma-160 --crossover 0 2>&1 | grep -E "queue|static"; t; done
PYTHONUNBUFFERED=1 timeout 60 python3 kernels/bench/moe_prefill_torch.py > "$OUT"/torch.log 2>&1; echo "torch rc=$? $(t)"; tail -8 "$OUT"/torch.log
timeout 200 "$B"/cuda_forward_test > "$OUT"/fwd.log 2>&1; echo "cuda_forward_test rc=$? $(t)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$OUT"/fwd.log | head
moe_prefill_memcheck 240
