#!/usr/bin/env bash
# One call on an H200 x2 machine: every kernel test, the forward / graph tests and the
# device prefill/decode tests on GPU 0 while compute-sanitizer memcheck runs the same kernel
# binaries on GPU 1; then kernels_bench and decode_bench on GPU 0; then end to end: `serve
# --device cuda` and `pdserve up` with both roles on CUDA (one GPU) serving a chat request
# through the router (prefill in chunks of 64), and `serve --device cuda --no-cuda-graphs`,
# each reply compared with a CPU `serve`'s at temperature 0.
# Usage: BIN=dir-with-binaries OUT=dir bash kernels/bench/run_roles_h200.sh
# BIN holds the test binaries, kernels_bench, decode_bench, pdserve and lib/ (built elsewhere).
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib"
LOG="$OUT/run.log"
exec > >(tee -a "$LOG") 2>&1
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
TESTS=(kernels_test moe_kernels_test transfer_kernels_test cuda_forward_test)
MC_PIDS=()
for b in "${TESTS[@]}"; do
  CUDA_VISIBLE_DEVICES=1 timeout 170 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$BIN/$b" \
    >"/tmp/memcheck_$b.log" 2>&1 &
  MC_PIDS+=($!)
done
echo "== tests (GPU 0)"
for b in "${TESTS[@]}" pd_device_test; do
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN/$b" >"/tmp/test_$b.log" 2>&1
  echo "$b rc=$? $(grep -cE '^\[       OK' "/tmp/test_$b.log") ok, $(grep -cE '^\[  SKIPPED' "/tmp/test_$b.log") skipped"
  grep -E "FAILED|Failure|graphs captured|logits error|errors? [0-9]|Expected|Which is" "/tmp/test_$b.log" | head -20
done
echo "== benchmarks (GPU 0)"
CUDA_VISIBLE_DEVICES=0 timeout 60 "$BIN/decode_bench" --preset tiny-k3 --ctx 128 --steps 50 >"$OUT/bench.log" 2>&1
echo "decode_bench rc=$?"
CUDA_VISIBLE_DEVICES=0 timeout 90 "$BIN/kernels_bench" >>"$OUT/bench.log" 2>&1
echo "kernels_bench rc=$?"
echo "== end to end (GPU 0)"
P="$BIN/pdserve"
export CUDA_VISIBLE_DEVICES=0
"$P" make-model --preset tiny-k3 --out /tmp/tk3 >/dev/null || echo "make-model failed"
"$P" serve --model /tmp/tk3 --port 18124 >/tmp/serve_cpu.log 2>&1 &
CPU=$!
"$P" serve --model /tmp/tk3 --device cuda --port 18123 >/tmp/serve_cuda.log 2>&1 &
GPU=$!
"$P" serve --model /tmp/tk3 --device cuda --no-cuda-graphs --port 18125 >/tmp/serve_eager.log 2>&1 &
EAGER=$!
mkdir -p /tmp/uplogs
"$P" up --model /tmp/tk3 --port 18130 --prefill-port 18131 --decode-port 18132 --bootstrap-port 18133 --chunk-size 64 \
  --prefill-arg=--device=cuda --decode-arg=--device=cuda --log-dir /tmp/uplogs >/tmp/up.log 2>&1 &
UP=$!
for _ in $(seq 150); do
  curl -sf localhost:18123/health >/dev/null && curl -sf localhost:18124/health >/dev/null &&
    curl -sf localhost:18125/health >/dev/null && grep -q "pdserve up: ready" /tmp/up.log && break
  sleep 0.2
done
REQ='{"messages": [{"role": "user", "content": "Hello there, GPU! Tell me about pages."}], "max_tokens": 32, "temperature": 0}'
for port in 18124 18123 18125 18130; do
  curl -s -m 60 -o "/tmp/reply_$port.json" -w "port $port: HTTP %{http_code}, %{time_total} s\n" "localhost:$port/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$REQ"
  python3 -c "import json; r=json.load(open('/tmp/reply_$port.json')); print(' ', repr(r['choices'][0]['message'])[:160], r['usage'])" 2>&1
done
msg() { python3 -c "import json; print(json.load(open('/tmp/reply_$1.json'))['choices'][0]['message'])" 2>/dev/null; }
[ -n "$(msg 18124)" ] && [ "$(msg 18123)" = "$(msg 18124)" ] && echo "serve cuda == serve cpu" || echo "serve cuda DIFFERS from serve cpu"
[ -n "$(msg 18124)" ] && [ "$(msg 18125)" = "$(msg 18124)" ] && echo "serve cuda eager == serve cpu" ||
  echo "serve cuda eager DIFFERS from serve cpu"
[ -n "$(msg 18124)" ] && [ "$(msg 18130)" = "$(msg 18124)" ] && echo "router(prefill cuda + decode cuda) == serve cpu" ||
  echo "router(prefill cuda + decode cuda) DIFFERS from serve cpu"
# Eight requests at once through the router (decode batches of several rows: graph buckets
# above 1), each compared with the CPU server's reply to the same request.
MANY=()
for i in $(seq 8); do
  R="{\"messages\": [{\"role\": \"user\", \"content\": \"Request $i: $(printf 'pages %.0s' $(seq $((i * 9))))\"}], \"max_tokens\": 24, \"temperature\": 0}"
  curl -s -m 60 -o "/tmp/many_r$i.json" localhost:18130/v1/chat/completions -H 'Content-Type: application/json' -d "$R" &
  MANY+=($!)
  curl -s -m 60 -o "/tmp/many_c$i.json" localhost:18124/v1/chat/completions -H 'Content-Type: application/json' -d "$R" &
  MANY+=($!)
done
wait "${MANY[@]}"
same=0
for i in $(seq 8); do
  a=$(python3 -c "import json; print(json.load(open('/tmp/many_r$i.json'))['choices'][0]['message'])" 2>/dev/null)
  b=$(python3 -c "import json; print(json.load(open('/tmp/many_c$i.json'))['choices'][0]['message'])" 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] && same=$((same + 1))
done
echo "8 concurrent requests through the router (both roles on CUDA): $same of 8 identical to serve cpu"
grep -h "device:" /tmp/serve_cuda.log /tmp/serve_eager.log /tmp/uplogs/* 2>/dev/null | cut -c1-220
curl -sf localhost:18132/metrics | grep -E '^pdserve_decode_transfer_(succeeded|failed|bytes)_total '
kill -INT $UP; kill $CPU $GPU $EAGER; wait $UP $CPU $GPU $EAGER 2>/dev/null
echo "== memcheck (GPU 1)"
for i in "${!TESTS[@]}"; do
  wait "${MC_PIDS[$i]}"; rc=$?
  echo "memcheck ${TESTS[$i]} rc=$rc: $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' "/tmp/memcheck_${TESTS[$i]}.log" | tr '\n' ' ')"
  grep -E "^\[  (PASSED|FAILED) " "/tmp/memcheck_${TESTS[$i]}.log"
done
for f in /tmp/memcheck_*.log; do echo "=== $f"; tail -40 "$f"; done >"$OUT/memcheck.log"
for f in /tmp/test_*.log; do echo "=== $f"; cat "$f"; done >"$OUT/tests.log"
{ cat /tmp/up.log; for f in /tmp/uplogs/* /tmp/serve_cuda.log; do echo "=== $f"; tail -30 "$f"; done; } >"$OUT/e2e.log"
date -u
