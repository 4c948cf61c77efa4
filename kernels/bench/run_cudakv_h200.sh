#!/usr/bin/env bash
# One H200: the CUDA backend on a bf16 MLA latent cache (branch cudakv). Tests (cuda_forward_test,
# pd_device_test) with compute-sanitizer memcheck of the new cases beside them; then end to end
# `serve` and `up` with --device cuda --kv-cache-dtype bfloat16 against the CPU server with
# bfloat16 (tiny-k3, greedy replies compared); then decode_bench's step time fp32 vs bf16
# (tiny-k3-mla512 at 8 x 4K and 1 x 16K). From the checkout root, with OUT set:
#   HERE      the folder holding bins.tar.xz (stripped binaries, lib/ beside them)
#   SRC       the path the binaries were built under (tests read tests/fixtures there)
#   STAGES    which parts to run: any of tests,e2e,bench (default all three)
#   E2E_IF_UNDER  with STAGES=tests: also run e2e when the tests took fewer seconds than this
set -uo pipefail
here=${HERE:-.dev/cudakv}
stages=${STAGES:-tests,e2e,bench}
start=$(date +%s)
mkdir -p /tmp/v && tar -C /tmp/v -xJf "$here/bins.tar.xz"
BIN=/tmp/v/bin
exec > >(tee -a "$OUT/summary.log") 2>&1
source kernels/bench/h200_env.sh "$BIN/lib" "${SRC:-/work/wt-cudakv}"
chmod +x "$BIN"/* 2>/dev/null
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
if [[ $stages == *tests* ]]; then
  echo "== tests, with memcheck of the new cases beside them"
  s=$(date +%s)
  timeout 160 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/cuda_forward_test" \
    --gtest_filter='Bf16CacheDevice.*:Bf16/Bf16CacheForward.*/1' >/tmp/san_bf16.log 2>&1 &
  SAN=$!
  timeout 160 "$BIN/cuda_forward_test" >/tmp/test_cuda_forward_test.log 2>&1 &
  T1=$!
  timeout 160 "$BIN/pd_device_test" >/tmp/test_pd_device_test.log 2>&1 &
  T2=$!
  report() {  # name pid
    wait "$2"
    echo "$1 rc=$? $(grep -cE '^\[       OK' "/tmp/test_$1.log") ok, $(grep -cE '^\[  SKIPPED' "/tmp/test_$1.log") skipped, $(( $(date +%s) - s )) s"
    grep -E "^\[  FAILED|Failure|Expected|Which is|error" "/tmp/test_$1.log" | head -12
  }
  report cuda_forward_test $T1
  report pd_device_test $T2
  grep -E "bf16 cache|bf16 MLA cache" /tmp/test_cuda_forward_test.log | head -12
  wait $SAN
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' /tmp/san_bf16.log | head -1) $(grep -E '^\[  (PASSED|FAILED)' /tmp/san_bf16.log | tr '\n' ' ') $(( $(date +%s) - s )) s"
  for f in /tmp/test_*.log /tmp/san_*.log; do echo "=== $f"; tail -60 "$f"; done >"$OUT/tests.log"
  [ $(( $(date +%s) - start )) -lt "${E2E_IF_UNDER:-0}" ] && stages+=",e2e"
fi
if [[ $stages == *e2e* ]]; then
  echo "== end to end (one GPU, --kv-cache-dtype bfloat16 everywhere)"
  P="$BIN/pdserve"
  D=(--kv-cache-dtype bfloat16)
  "$P" make-model --preset tiny-k3 --out /tmp/tk3 >/dev/null || echo "make-model failed"
  "$P" serve --model /tmp/tk3 --port 18124 "${D[@]}" >/tmp/serve_cpu.log 2>&1 &
  CPU=$!
  "$P" serve --model /tmp/tk3 --device cuda --port 18123 "${D[@]}" >/tmp/serve_cuda.log 2>&1 &
  GPU=$!
  mkdir -p /tmp/uplogs
  "$P" up --model /tmp/tk3 --port 18130 --prefill-port 18131 --decode-port 18132 --bootstrap-port 18133 \
    --chunk-size 64 --device cuda --prefill-tp 1 --decode-tp 1 "${D[@]}" --log-dir /tmp/uplogs >/tmp/up.log 2>&1 &
  UP=$!
  for _ in $(seq 300); do
    curl -sf localhost:18123/health >/dev/null && curl -sf localhost:18124/health >/dev/null && grep -q "pdserve up: ready" /tmp/up.log && break
    sleep 0.2
  done
  for port in 18124 18123 18132; do
    curl -s localhost:$port/get_server_info | python3 -c "import json,sys; p=json.load(sys.stdin)['pools']; print('port $port pools:', p['kv_cache_dtype'], p['kv_bytes_per_token'], 'bytes a token')" 2>&1
  done
  grep -h "device: cuda" /tmp/serve_cuda.log /tmp/uplogs/* 2>/dev/null | head -3
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
    echo "8 concurrent requests on port $port: $same of 8 identical to serve cpu (bfloat16)"
  done
  msg /tmp/many_18123_1.json | head -c 300; echo
  curl -sf localhost:18132/metrics | grep -E '^pdserve_decode_transfer_(succeeded|failed)_total |^pdserve_decode_transfer_bytes_total '
  kill -INT $UP; kill $CPU $GPU; wait $UP $CPU $GPU 2>/dev/null
  { cat /tmp/up.log; for f in /tmp/uplogs/* /tmp/serve_cuda.log /tmp/serve_cpu.log; do echo "=== $f"; tail -30 "$f"; done; } >"$OUT/e2e.log"
fi
if [[ $stages == *bench* ]]; then
  echo "== decode_bench, kv_cache_dtype float32 vs bfloat16 (graphs)"
  date -u
  timeout 75 "$BIN/decode_bench" --preset tiny-k3-mla512 --kv-cache-dtype compare --ctx 4096 --steps 100 --batches 8 >"$OUT/bench_4k.log" 2>&1
  echo "decode_bench 8 x 4K rc=$?"; cat "$OUT/bench_4k.log"
  timeout 75 "$BIN/decode_bench" --preset tiny-k3-mla512 --kv-cache-dtype compare --ctx 16384 --steps 100 --batches 1 >"$OUT/bench_16k.log" 2>&1
  echo "decode_bench 1 x 16K rc=$?"; cat "$OUT/bench_16k.log"
  date -u
fi
