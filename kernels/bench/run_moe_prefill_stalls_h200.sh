#!/usr/bin/env bash
# ncu source counters of the prefill MoE main loops (twenty-fourth session, docs/perf.md "Where kWgmmaTma160's stalls are"):
# the bench with the random routing beside the other three, then kWgmmaTma160 on uniform and random rows, kWgmma and kWgmmaTma on one hot expert.
#   OUT=dir bash .dev/X/run.sh   (this file, carried with bins.tar.xz: bin/ = moe_prefill_bench, bin/lib/ = libcudart.so.13, libspdlog, libfmt, libpcre2-8)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
timeout 90 "$B"/moe_prefill_bench --kernels wgmma,wgmma-tma,wgmma-tma-160 --crossover 0 2>&1 | grep -E "queue|static"; t
prof() {  # name kernels routing regex count
  timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats -k "regex:$4" -s 2 -c "$5" -o "/tmp/$1" \
    "$B"/moe_prefill_bench --reps 1 --kernels "$2" --routing "$3" --crossover 0 > "$OUT/$1.ncu.log" 2>&1; echo "ncu $1 rc=$? $(t)"
  ncu -i "/tmp/$1.ncu-rep" --page source --csv --print-source sass > "/tmp/$1.csv" 2>/dev/null
  # The source page lists each profiled launch twice; every listing gets its own summary.
  for k in $(seq 0 $(( $(grep -c '^"Kernel Name"' "/tmp/$1.csv") - 1 ))); do python3 tools/kernels/ncu_source_hotspots.py "/tmp/$1.csv" --kernel "$k" --top 25 --blocks 1 > "$OUT/$1.k$k.txt" 2>&1; done
  ncu -i "/tmp/$1.ncu-rep" --page details --csv > "$OUT/$1.details.csv" 2>/dev/null
  xz -T4 -c "/tmp/$1.csv" > "$OUT/$1.csv.xz"
}
prof tma160u wgmma-tma-160 uniform prefill_wgmma_tma 2
prof tma160r wgmma-tma-160 random prefill_wgmma_tma 2
prof wgh wgmma hot prefill_wgmma 1
prof tmah wgmma-tma hot prefill_wgmma_tma 1
ls -la "$OUT"
