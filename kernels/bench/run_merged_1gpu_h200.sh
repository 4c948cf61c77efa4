#!/usr/bin/env bash
# One H200 (run_merged_h200.sh is the two-GPU check): a merged tree on the device at the end of a
# session: every single-GPU test binary, compute-sanitizer on the session's new forms, their
# benches, and end to end CPU vs CUDA replies (serve --device cuda, up --device cuda). What varies
# by session comes in the environment:
#   HERE                  the folder holding bins.tar.xz (stripped binaries, lib/ beside them)
#   SAN_MLA, SAN_MOE      gtest filters of mla_decode_test / moe_decode_test for memcheck
#   SAN_MLA_RACE          the same for racecheck of mla_decode_test (empty: none)
#   MOE_PREFILL_FILTER    moe_prefill_test cases for memcheck (empty: none)
#   MLA_BENCH_MODE        mla_decode_bench's mode (default m15: the early forms against the old pick)
#   MOE_DECODE_KERNELS    moe_decode_bench --kernels list
#   MOE_PREFILL_KERNELS   moe_prefill_bench --kernels list (empty: no prefill bench)
set -uo pipefail
here=${HERE:-.dev/merged}
mkdir -p /tmp/v && tar -C /tmp/v -xJf "$here/bins.tar.xz"
BIN=/tmp/v/bin
exec > >(tee -a "$OUT/summary.log") 2>&1
source kernels/bench/h200_env.sh "$BIN/lib" /work/main
chmod +x "$BIN"/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
echo "== tests"
for b in mla_decode_test moe_decode_test moe_prefill_test cuda_forward_test pd_device_test kda_chunk_pipeline_test kda_chunk_kernels_test \
  kda_decode_kernels_test kernels_test moe_kernels_test mla_prefill_test transfer_kernels_test; do
  s=$(date +%s)
  timeout 150 "$BIN/$b" >"/tmp/test_$b.log" 2>&1
  echo "$b rc=$? $(grep -cE '^\[       OK' "/tmp/test_$b.log") ok, $(grep -cE '^\[  SKIPPED' "/tmp/test_$b.log") skipped, $(( $(date +%s) - s )) s"
  grep -E "^\[  FAILED|Failure|Expected|Which is" "/tmp/test_$b.log" | head -12
done
echo "== compute-sanitizer (new forms)"
san() {  # label tool timeout binary filter
  timeout "$3" compute-sanitizer --tool "$2" --error-exitcode 9 "$BIN/$4" --gtest_filter="$5" >"/tmp/san_$1.log" 2>&1
  echo "$1 ($2) rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "/tmp/san_$1.log" | head -1) $(grep -E '^\[  (PASSED|FAILED)' "/tmp/san_$1.log" | tr '\n' ' ')"
}
san mla memcheck 90 mla_decode_test "${SAN_MLA:-*}"
[ -n "${SAN_MLA_RACE:-}" ] && san mla_race racecheck 100 mla_decode_test "$SAN_MLA_RACE"
san moe_decode memcheck 90 moe_decode_test "${SAN_MOE:-*SmallBatch*:*Skewed*:*Replays*}"
[ -n "${MOE_PREFILL_FILTER:-}" ] && san moe_prefill memcheck 90 moe_prefill_test "$MOE_PREFILL_FILTER"
echo "== end to end (one GPU)"
P="$BIN/pdserve"
"$P" make-model --preset tiny-k3 --out /tmp/tk3 >/dev/null || echo "make-model failed"
"$P" serve --model /tmp/tk3 --port 18124 >/tmp/serve_cpu.log 2>&1 &
CPU=$!
"$P" serve --model /tmp/tk3 --device cuda --port 18123 >/tmp/serve_cuda.log 2>&1 &
GPU=$!
mkdir -p /tmp/uplogs
"$P" up --model /tmp/tk3 --port 18130 --prefill-port 18131 --decode-port 18132 --bootstrap-port 18133 \
  --chunk-size 64 --device cuda --prefill-tp 1 --decode-tp 1 --log-dir /tmp/uplogs >/tmp/up.log 2>&1 &
UP=$!
for _ in $(seq 300); do
  curl -sf localhost:18123/health >/dev/null && curl -sf localhost:18124/health >/dev/null && grep -q "pdserve up: ready" /tmp/up.log && break
  sleep 0.2
done
msg() { python3 -c "import json; print(json.load(open('$1'))['choices'][0]['message'])" 2>/dev/null; }
MANY=()
for i in $(seq 8); do
  R="{\"messages\": [{\"role\": \"user\", \"content\": \"Request $i: $(printf 'pages %.0s' $(seq $((i * 9))))\"}], \"max_tokens\": 24, \"temperature\": 0}"
  for port in 18124 18123 18130; do
    curl -s -m 90 -o "/tmp/many_${port}_$i.json" localhost:$port/v1/chat/completions -H 'Content-Type: application/json' -d "$R" &
    MANY+=($!)
  done
done
wait "${MANY[@]}"
for port in 18123 18130; do
  same=0
  for i in $(seq 8); do
    a=$(msg "/tmp/many_${port}_$i.json"); b=$(msg "/tmp/many_18124_$i.json")
    [ -n "$a" ] && [ "$a" = "$b" ] && same=$((same + 1))
  done
  echo "8 concurrent requests on port $port: $same of 8 identical to serve cpu"
done
curl -sf localhost:18132/metrics | grep -E '^pdserve_decode_transfer_(succeeded|failed)_total '
kill -INT $UP; kill $CPU $GPU; wait $UP $CPU $GPU 2>/dev/null
echo "== benches"
mode=${MLA_BENCH_MODE:-m15}
timeout 60 "$BIN/mla_decode_bench" "$mode" >"$OUT/mla_$mode.log" 2>&1; echo "mla_decode_bench $mode rc=$?"; tail -30 "$OUT/mla_$mode.log"
timeout 60 "$BIN/moe_decode_bench" --reps 20 --kernels "${MOE_DECODE_KERNELS:-wa-pdl-l2,wa-pdl-f32}" >"$OUT/moe_decode.log" 2>&1
echo "moe_decode_bench rc=$?"; tail -40 "$OUT/moe_decode.log"
[ -n "${MOE_PREFILL_KERNELS:-}" ] && { timeout 90 "$BIN/moe_prefill_bench" --reps 10 --kernels "$MOE_PREFILL_KERNELS" --crossover 0 >"$OUT/moe_prefill.log" 2>&1
  echo "moe_prefill_bench rc=$?"; tail -30 "$OUT/moe_prefill.log"; }
date -u
for f in /tmp/test_*.log /tmp/san_*.log; do echo "=== $f"; tail -40 "$f"; done >"$OUT/tests.log"
{ cat /tmp/up.log; for f in /tmp/uplogs/* /tmp/serve_cuda.log; do echo "=== $f"; tail -30 "$f"; done; } >"$OUT/e2e.log"
