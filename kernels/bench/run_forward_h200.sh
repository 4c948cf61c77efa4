#!/usr/bin/env bash
# The device forward on the H200: the forward test (CPU vs GPU, golden fixtures, greedy), once
# under compute-sanitizer memcheck, and a `pdserve serve --device cuda` smoke with one chat
# request (its reply compared with the CPU server's at temperature 0).
# Usage: BIN=dir-with-binaries OUT=dir bash kernels/bench/run_forward_h200.sh
# BIN holds cuda_forward_test, pdserve and lib/ (their shared libraries, built elsewhere).
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib"
nvidia-smi -L
echo "== forward test"
"$BIN/cuda_forward_test" --gtest_output=xml:"$OUT/cuda_forward_test.xml" 2>&1 | tee "$OUT/forward_test.log" | grep -E "^(gpu |tiny|\[  (PASSED|FAILED|  OK|SKIPPED) )|Failure|error|Expected|Which is" | head -60
echo "== memcheck"
timeout 400 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$BIN/cuda_forward_test" > "$OUT/memcheck.log" 2>&1
echo "memcheck exit $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
echo "== serve smoke"
"$BIN/pdserve" make-model --preset tiny-k3 --out /tmp/tk3 > /dev/null || echo "make-model failed"
"$BIN/pdserve" serve --model /tmp/tk3 --device cuda --port 18123 > "$OUT/serve_cuda.log" 2>&1 &
CUDA_PID=$!
"$BIN/pdserve" serve --model /tmp/tk3 --port 18124 > "$OUT/serve_cpu.log" 2>&1 &
CPU_PID=$!
for _ in $(seq 60); do curl -sf localhost:18123/health > /dev/null && curl -sf localhost:18124/health > /dev/null && break; sleep 1; done
REQ='{"messages": [{"role": "user", "content": "Hello there, GPU!"}], "max_tokens": 32, "temperature": 0}'
for port in 18123 18124; do
  curl -s -m 60 -w "%{time_total}" -o "$OUT/reply_$port.json" localhost:$port/v1/chat/completions -H 'Content-Type: application/json' -d "$REQ" > /tmp/time_$port.txt; echo "port $port request wall $(cat /tmp/time_$port.txt) s"
  echo "port $port: $(python3 -c "import json,sys; r=json.load(open('$OUT/reply_$port.json')); m=r['choices'][0]['message']; print(repr(m['content']), repr(m.get('reasoning_content', ''))[:60], r['usage'])" 2>&1)"
done
cmp -s <(python3 -c "import json; print(json.load(open('$OUT/reply_18123.json'))['choices'][0]['message'])") \
       <(python3 -c "import json; print(json.load(open('$OUT/reply_18124.json'))['choices'][0]['message'])") \
  && echo "cuda reply == cpu reply" || echo "cuda reply differs from cpu reply"
grep -m1 "device:" "$OUT/serve_cuda.log"
"$BIN/pdserve" prefill --model /tmp/tk3 --device cuda --port 18125 > /tmp/prefill_refused.log 2>&1 & sleep 3; kill $! 2>/dev/null
echo "prefill --device cuda: $(tail -1 /tmp/prefill_refused.log)"
kill $CUDA_PID $CPU_PID; wait
