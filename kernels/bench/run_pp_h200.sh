#!/usr/bin/env bash
# One call on nvidia-h200-x2 for pipeline parallelism (issue 10): the NCCL pipeline tests
# (PP2 over ncclSend/ncclRecv equals PP1 bit for bit; a failure crosses the channel), the
# rest of cuda_tp_test on both GPUs (the NCCL table grew), and pp_bench (stage hand-off at
# the K3 activation shapes vs the bus rate measured in the same run).
# Usage (repository root on the device): BIN=dir OUT=dir bash kernels/bench/run_pp_h200.sh
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib" /work/main
chmod +x "$BIN"/* 2>/dev/null
exec > >(tee -a "$OUT/run.log") 2>&1
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
nvidia-smi topo -m | head -4
echo "== cuda_tp_test (GPUs 0,1)"
CUDA_VISIBLE_DEVICES=0,1 timeout 120 "$BIN/cuda_tp_test" >/tmp/test_tp.log 2>&1
echo "cuda_tp_test rc=$? $(grep -cE '^\[       OK' /tmp/test_tp.log) ok, $(grep -cE '^\[  SKIPPED' /tmp/test_tp.log) skipped"
grep -E "^\[       OK|^\[  FAILED|^\[  SKIPPED|Failure|Expected|Which is|NCCL 2" /tmp/test_tp.log | head -40
echo "== pp_bench (GPUs 0,1)"
CUDA_VISIBLE_DEVICES=0,1 timeout 40 "$BIN/pp_bench" --reps 20
echo "pp_bench rc=$?"
date -u
