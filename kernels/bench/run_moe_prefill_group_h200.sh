#!/usr/bin/env bash
# moepf4 device run (one call, <= 150 s; docs/perf.md "Bare wgmma loop and two-k-step commit
# groups"): GPU 0: wgmma_loop_bench (the bare main loop under each issue pattern), moe_prefill_test
# (every main loop), moe_prefill_bench --kernels $KERN, the torch anchors. GPU 1 meanwhile:
# compute-sanitizer memcheck of the small test cases (every main loop), the loop bench again,
# then (where bin/ has it) moe_prefill_bench_ablate: kWgmma with parts of its main loop removed
# (--ablate masks: moe_prefill_wgmma_sm90.cu), else the prefill bench again. Nothing is built there.
#   OUT=dir [KERN=wgmma,wgmma-g2,...] bash .dev/moepf4/run.sh   (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moepf4_out}; mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
kern=${KERN:-wgmma,wgmma-smemW,wgmma-g2,wgmma-smemW-g2}
ngpu=$(nvidia-smi -L | wc -l); side_gpu=1; [ "$ngpu" -lt 2 ] && side_gpu=0
side_work() {
  timeout 70 env CUDA_VISIBLE_DEVICES=$side_gpu compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
    >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
  timeout 15 env CUDA_VISIBLE_DEVICES=$side_gpu "$here/bin/wgmma_loop_bench" >"$out/loop_gpu1.log" 2>&1; echo "loop gpu1 rc=$? $(t)" >>"$out/loop_gpu1.log"
  if [ -x "$here/bin/moe_prefill_bench_ablate" ]; then
    timeout 60 env CUDA_VISIBLE_DEVICES=$side_gpu "$here/bin/moe_prefill_bench_ablate" --kernels wgmma --ablate 1,2,4,3,7,15 --crossover 0 >"$out/bench_gpu1.log" 2>&1
  else
    timeout 25 env CUDA_VISIBLE_DEVICES=$side_gpu "$here/bin/moe_prefill_bench" --kernels "$kern" >"$out/bench_gpu1.log" 2>&1
  fi
  echo "bench gpu1 rc=$? $(t)" >>"$out/bench_gpu1.log"
}
if [ "$side_gpu" = 1 ]; then side_work & side=$!; fi
export CUDA_VISIBLE_DEVICES=0
timeout 15 "$here/bin/wgmma_loop_bench" >"$out/loop.log" 2>&1; echo "loop rc=$? $(t)" >>"$out/loop.log"
echo "== wgmma_loop_bench (GPU 0)"; cat "$out/loop.log"
timeout 50 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test (GPU 0)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/test.log" | head -30
grep -E "prefill MoE.*(wgmma-g2|smemW-g2)" "$out/test.log" | head -40
timeout 25 "$here/bin/moe_prefill_bench" --kernels "$kern" >"$out/bench.log" 2>&1; echo "bench rc=$? $(t)" >>"$out/bench.log"
echo "== bench (GPU 0)"; cat "$out/bench.log"
PYTHONUNBUFFERED=1 timeout 30 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
echo "== torch (GPU 0)"; tail -10 "$out/torch.log"
if [ "$side_gpu" = 1 ]; then wait "$side"; else side_work; fi
echo "(side work on GPU $side_gpu of $ngpu)"
echo "== memcheck (GPU $side_gpu)"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid" "$out/memcheck.log" | head -20
echo "== wgmma_loop_bench (GPU $side_gpu)"; cat "$out/loop_gpu1.log"
echo "== bench (GPU $side_gpu; ablation where present)"; grep -E "^prefill|rc=" "$out/bench_gpu1.log"
