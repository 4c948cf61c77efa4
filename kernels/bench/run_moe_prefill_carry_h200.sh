#!/usr/bin/env bash
# moepf5 device run (one call, <= 150 s; docs/perf.md "Ring carried across tiles"): GPU 0:
# moe_prefill_test (every main loop, every case), then moe_prefill_bench --kernels $KERN three
# times (kWgmma and the carry forms side by side, run after run), the torch anchor. GPU 1
# meanwhile: compute-sanitizer memcheck of the small test cases (every main loop), then the
# prefill bench twice more. Nothing is built there.
#   OUT=dir [KERN=wgmma,wgmma-carry,wgmma-carry6] bash .dev/moepf5/run.sh   (this file, carried with bin/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moepf5_out}; mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
kern=${KERN:-wgmma,wgmma-carry,wgmma-carry6}
ngpu=$(nvidia-smi -L | wc -l); side_gpu=1; [ "$ngpu" -lt 2 ] && side_gpu=0
side_work() {
  timeout 75 env CUDA_VISIBLE_DEVICES=$side_gpu compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
    >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
  for i in 1 2; do
    timeout 20 env CUDA_VISIBLE_DEVICES=$side_gpu "$here/bin/moe_prefill_bench" --kernels "$kern" --crossover 0 >>"$out/bench_gpu1.log" 2>&1
    echo "bench gpu1 run $i rc=$? $(t)" >>"$out/bench_gpu1.log"
  done
}
if [ "$side_gpu" = 1 ]; then side_work & side=$!; fi
export CUDA_VISIBLE_DEVICES=0
timeout 50 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test (GPU 0)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/test.log" | head -30
grep -E "prefill MoE.*(wgmma\]|carry)" "$out/test.log" | head -60
for i in 1 2 3; do
  timeout 20 "$here/bin/moe_prefill_bench" --kernels "$kern" --crossover 0 >>"$out/bench.log" 2>&1; echo "bench run $i rc=$? $(t)" >>"$out/bench.log"
done
echo "== bench (GPU 0)"; cat "$out/bench.log"
PYTHONUNBUFFERED=1 timeout 30 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
echo "== torch (GPU 0)"; tail -10 "$out/torch.log"
if [ "$side_gpu" = 1 ]; then wait "$side"; else side_work; fi
echo "(side work on GPU $side_gpu of $ngpu)"
echo "== memcheck (GPU $side_gpu)"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid" "$out/memcheck.log" | head -20
echo "== bench (GPU $side_gpu)"; grep -E "^prefill|rc=" "$out/bench_gpu1.log"
