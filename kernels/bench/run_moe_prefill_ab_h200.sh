#!/usr/bin/env bash
# moepre3 device run (one call, <= 150 s): GPU 0: moe_prefill_test, the bench of this build
# (queue + static schedules), the bench of the previous build (bin/moe_prefill_bench_old),
# the torch anchor. GPU 1 meanwhile: memcheck of moe_prefill_test, then the scale-word
# experiment (bin/*_sw: test + bench, built with -DPDS_PREFILL_SCALE_WORDS from commit
# d7c09bf; dropped since) and this build's bench again (same-GPU A/B).
#   OUT=dir bash .dev/moepre3/run.sh      (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moepre3_out}; mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
(
  timeout 70 env CUDA_VISIBLE_DEVICES=1 compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
  timeout 20 env CUDA_VISIBLE_DEVICES=1 "$here/bin/moe_prefill_test_sw" >"$out/test_sw.log" 2>&1; echo "test_sw rc=$? $(t)" >>"$out/test_sw.log"
  timeout 20 env CUDA_VISIBLE_DEVICES=1 "$here/bin/moe_prefill_bench_sw" >"$out/bench_sw_gpu1.log" 2>&1; echo "bench_sw rc=$? $(t)" >>"$out/bench_sw_gpu1.log"
  timeout 20 env CUDA_VISIBLE_DEVICES=1 "$here/bin/moe_prefill_bench" >"$out/bench_new_gpu1.log" 2>&1; echo "bench_new rc=$? $(t)" >>"$out/bench_new_gpu1.log"
) &
side=$!
export CUDA_VISIBLE_DEVICES=0
timeout 30 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test (GPU 0)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|prefill MoE|rc=" "$out/test.log" | head -30
timeout 25 "$here/bin/moe_prefill_bench" >"$out/bench_new.log" 2>&1; echo "bench new rc=$? $(t)" >>"$out/bench_new.log"
timeout 25 "$here/bin/moe_prefill_bench_old" >"$out/bench_old.log" 2>&1; echo "bench old rc=$? $(t)" >>"$out/bench_old.log"
echo "== bench new (GPU 0)"; cat "$out/bench_new.log"
echo "== bench old (GPU 0)"; grep -E "^prefill|rc=" "$out/bench_old.log"
PYTHONUNBUFFERED=1 timeout 55 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
echo "== torch (GPU 0)"; tail -12 "$out/torch.log"
wait "$side"
echo "== memcheck (GPU 1)"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED" "$out/memcheck.log" | head
echo "== test_sw (GPU 1)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/test_sw.log" | head
echo "== bench sw (GPU 1)"; grep -E "^prefill|rc=" "$out/bench_sw_gpu1.log"
echo "== bench new (GPU 1)"; grep -E "^prefill|rc=" "$out/bench_new_gpu1.log"
