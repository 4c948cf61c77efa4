#!/usr/bin/env bash
# Issue 11's figures in one call (docs/perf.md "Issue 11 in one run", thirtieth session): ours (the
# decode role's step and kAuto at EP32 batch 1-64, one step a graph and 20 back to back beside a
# read-only stream; the prefill forms kAuto picks at EP4, the 8K chunk's four routings and 16 rows
# an expert), torch (bf16 dequantised weights: one matmul pair per expert and
# torch._grouped_mm) and the peer, OpenAI's triton_kernels matmul_ogs on MXFP4 (moe_peer_triton.py), on
# the same row counts, in about 70 s.
#   OUT=dir bash .dev/X/run.sh   (carried with bins.tar.xz: bin/final/ = moe_decode_bench, moe_prefill_bench;
#   bin/lib/ as h200_env.sh takes it; src/python/triton_kernels/ = the triton_kernels tree, third-party,
#   never committed: `git archive 6549689d python/triton_kernels` of the fork 3gx/triton)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source kernels/bench/h200_bins.sh "$here"
R=$B/final
export PYTHONPATH=kernels/bench PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
timeout 150 "$R"/moe_decode_bench --reps 20 --batches 1,2,4,8,16,32,48,64 --kernels wa-pdl-qgmma-wide --routes "$OUT"/routes.txt \
  > "$OUT"/decode.log 2>&1; echo "moe_decode_bench rc=$? $(t)"
timeout 90 python3 kernels/bench/moe_decode_torch.py "$OUT"/routes.txt > "$OUT"/decode_torch.log 2>&1; echo "moe_decode_torch rc=$? $(t)"
# kAuto's pick: kWgmmaTma160W for the 8K chunk (146 rows an expert), kWgmmaTmaNarrow at 16 rows an expert.
for rk in 32768:wgmma-tma-160w 3584:wgmma-tma-narrow 3584:wgmma-tma-160w; do
  r=${rk%%:*} k=${rk#*:}
  timeout 60 "$R"/moe_prefill_bench --kernels "$k" --crossover 0 --rows "$r" > "$OUT"/prefill_"$k"_"$r".log 2>&1
  echo "moe_prefill_bench $k rows $r rc=$? $(t)"; grep -E " queue " "$OUT"/prefill_"$k"_"$r".log | awk '{print $2, $(NF-8)}' | tr '\n' ' '; echo
done
timeout 120 python3 kernels/bench/moe_prefill_torch.py --reps 5 --rows 32768,3584 > "$OUT"/prefill_torch.log 2>&1
echo "moe_prefill_torch rc=$? $(t)"; cat "$OUT"/prefill_torch.log
TRITON_KERNELS_PATH=$here/src/python/triton_kernels timeout 240 python3 kernels/bench/moe_peer_triton.py "$OUT"/routes.txt --reps 20 --deadline 200 \
  --batches 1,2,4,8,16,32,48,64 --prefill uniform,zipf,hot,random --prefill-rows 32768,3584 > "$OUT"/peer.log 2>&1
echo "moe_peer_triton rc=$? $(t)"; grep -vE "^\s*$" "$OUT"/peer.log | tail -40
