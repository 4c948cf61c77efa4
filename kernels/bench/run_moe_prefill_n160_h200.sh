#!/usr/bin/env bash
# moepf3 device run (one call, <= 150 s; docs/perf.md "Token tiles of 160"): GPU 0:
# moe_prefill_test (every main loop), moe_prefill_bench --kernels wgmma,wgmma-160, main's bench
# before the change (old/, kWgmma), the torch anchors. GPU 1 meanwhile: compute-sanitizer
# memcheck of the small test cases (every main loop), a second bench sample, then ncu
# (SpeedOfLight, LaunchStats) on the uniform --quick launches of both loops: gate/up and down
# each. Nothing is built there.
#   OUT=dir bash .dev/moepf3/run.sh   (this file, carried with bin/, old/ and lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/moepf3_out}; mkdir -p "$out"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$here/lib"
chmod +x "$here"/bin/* "$here"/old/* 2>/dev/null
T0=$(date +%s); t() { echo "t=$(( $(date +%s) - T0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
kern=wgmma,wgmma-160
ngpu=$(nvidia-smi -L | wc -l); side_gpu=1; [ "$ngpu" -lt 2 ] && side_gpu=0
side_work() {
  timeout 80 env CUDA_VISIBLE_DEVICES=$side_gpu compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/moe_prefill_test" --gtest_filter="$small" \
    >"$out/memcheck.log" 2>&1; echo "memcheck rc=$? $(t)" >>"$out/memcheck.log"
  timeout 20 env CUDA_VISIBLE_DEVICES=$side_gpu "$here/bin/moe_prefill_bench" --kernels "$kern" >"$out/bench_gpu1.log" 2>&1
  echo "bench gpu1 rc=$? $(t)" >>"$out/bench_gpu1.log"
  left=$(( 135 - ($(date +%s) - T0) ))
  if [ "$left" -gt 15 ]; then
    timeout "$left" env CUDA_VISIBLE_DEVICES=$side_gpu ncu --clock-control none -k regex:prefill_wgmma -c 16 --section SpeedOfLight --section LaunchStats \
      "$here/bin/moe_prefill_bench" --reps 1 --quick 1 --kernels "$kern" >"$out/ncu.log" 2>&1
    echo "ncu rc=$? $(t)" >>"$out/ncu.log"
  else echo "ncu skipped: $left s left" >"$out/ncu.log"; fi
}
if [ "$side_gpu" = 1 ]; then side_work & side=$!; fi
export CUDA_VISIBLE_DEVICES=0
timeout 50 "$here/bin/moe_prefill_test" >"$out/test.log" 2>&1; echo "moe_prefill_test rc=$? $(t)" >>"$out/test.log"
echo "== test (GPU 0)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$out/test.log" | head -30
grep -E "prefill MoE.*wgmma-160" "$out/test.log" | head -60
timeout 25 "$here/bin/moe_prefill_bench" --kernels "$kern" >"$out/bench.log" 2>&1; echo "bench rc=$? $(t)" >>"$out/bench.log"
echo "== bench (GPU 0)"; cat "$out/bench.log"
timeout 15 "$here/old/moe_prefill_bench" --kernels wgmma >"$out/bench_old.log" 2>&1; echo "bench old rc=$? $(t)" >>"$out/bench_old.log"
echo "== bench old (main before the change, GPU 0)"; grep -E "^prefill|rc=" "$out/bench_old.log"
PYTHONUNBUFFERED=1 timeout 30 python3 "$here/moe_prefill_torch.py" >"$out/torch.log" 2>&1; echo "torch rc=$? $(t)" >>"$out/torch.log"
echo "== torch (GPU 0)"; tail -10 "$out/torch.log"
if [ "$side_gpu" = 1 ]; then wait "$side"; else side_work; fi
echo "(side work on GPU $side_gpu of $ngpu)"
echo "== memcheck (GPU $side_gpu)"; grep -E "ERROR SUMMARY|rc=|FAILED|PASSED|Invalid" "$out/memcheck.log" | head -20
echo "== bench (GPU $side_gpu)"; grep -E "^prefill|rc=" "$out/bench_gpu1.log"
echo "== ncu (GPU $side_gpu, uniform --quick; per loop: gate/up then down)"
grep -E "prefill_wgmma|Duration|Compute \(SM\) Throughput|Registers Per|rc=|skipped" "$out/ncu.log" | sed -E 's/void pdserve::cuda::moe_prefill_detail::\(anonymous namespace\):://; s/\(pdserve::cuda::Mxfp4Decode.*//' | head -80
