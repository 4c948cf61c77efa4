#!/usr/bin/env bash
# Where the backend's switch between the prefill grouped GEMM and the decode kernels belongs
# (twenty-fifth session, docs/perf.md "The backend's switch to the decode kernels"): the crossover
# lines on uniform and random rows at EP4's 224 local experts and at an EP32 decode rank's 28, ~60 s.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/ = moe_prefill_bench, bin/lib/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
for n in 28 224; do
  echo "== $n experts"; timeout 90 "$B"/moe_prefill_bench --kernels wgmma-tma-160 --routing uniform --crossover-experts "$n" 2>&1 | grep crossover; t
done
