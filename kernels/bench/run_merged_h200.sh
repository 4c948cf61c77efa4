#!/usr/bin/env bash
# One call on nvidia-h200-x2 after the session's merges (NCCL TP + device roles + decode graphs
# + fused KDA / MoE decode kernels + split-KV MLA decode + MLA, KDA and MoE prefill kernels; PP over NCCL is in cuda_tp_test, PP on the CUDA backend in cuda_pp_test): every GPU test binary on GPU 0 (cuda_tp_test on both),
# memcheck of the backend forward and the device-role tests on GPU 1 meanwhile, then end to end:
# a CPU `serve`, `serve --device cuda` (graphs), `serve --device cuda --tp 2`, `--pp 2`, and `pdserve up`
# with prefill on CUDA at TP2 (GPUs 0 and 1) and decode on CUDA at TP1 (GPU 0), every reply
# compared with the CPU server's at temperature 0 (one request, then 8 at once via the router).
# Usage (repository root on the device): BIN=dir OUT=dir bash kernels/bench/run_merged_h200.sh
# BIN holds the binaries (stripped, built elsewhere) and lib/ with the shared libraries.
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# The golden-fixture tests look under the source path the binaries were built from (linked here).
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib" /work/main
chmod +x "$BIN"/* 2>/dev/null
exec > >(tee -a "$OUT/run.log") 2>&1
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
MC=(cuda_forward_test pd_device_test mla_decode_test)
MC_PIDS=()
for b in "${MC[@]}"; do
  CUDA_VISIBLE_DEVICES=1 timeout 200 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$BIN/$b" \
    >"/tmp/memcheck_$b.log" 2>&1 &
  MC_PIDS+=($!)
done
# The block variant's barrier fix (branch mladec6) after racecheck found 15 hazards there.
CUDA_VISIBLE_DEVICES=1 timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/mla_decode_test" \
  --gtest_filter='*GraphLaunch*:*TinyModel*' >/tmp/racecheck_mla.log 2>&1 &
RC_PID=$!
echo "== tests (GPU 0; cuda_tp_test on 0 and 1)"
for b in kernels_test mla_decode_test mla_prefill_test kda_decode_kernels_test kda_chunk_kernels_test kda_chunk_pipeline_test moe_kernels_test moe_decode_test moe_prefill_test transfer_kernels_test \
  cuda_forward_test pd_device_test cuda_tp_test cuda_pp_test; do
  vis=0; case $b in cuda_tp_test | cuda_pp_test) vis=0,1 ;; esac
  CUDA_VISIBLE_DEVICES=$vis timeout 150 "$BIN/$b" >"/tmp/test_$b.log" 2>&1
  echo "$b rc=$? $(grep -cE '^\[       OK' "/tmp/test_$b.log") ok, $(grep -cE '^\[  SKIPPED' "/tmp/test_$b.log") skipped"
  grep -E "^\[  FAILED|Failure|Expected|Which is" "/tmp/test_$b.log" | head -12
done
echo "== end to end"
P="$BIN/pdserve"
"$P" make-model --preset tiny-k3 --out /tmp/tk3 >/dev/null || echo "make-model failed"
CUDA_VISIBLE_DEVICES=0 "$P" serve --model /tmp/tk3 --port 18124 >/tmp/serve_cpu.log 2>&1 &
CPU=$!
CUDA_VISIBLE_DEVICES=0 "$P" serve --model /tmp/tk3 --device cuda --port 18123 >/tmp/serve_cuda.log 2>&1 &
GPU=$!
CUDA_VISIBLE_DEVICES=0,1 "$P" serve --model /tmp/tk3 --device cuda --tp 2 --port 18126 >/tmp/serve_tp2.log 2>&1 &
TP2=$!
# bf16 prefill attention: informational (its logits move ~1e-3, so a near tie may flip a token).
CUDA_VISIBLE_DEVICES=1 "$P" serve --model /tmp/tk3 --device cuda --bf16-mla-prefill --port 18127 >/tmp/serve_bf16.log 2>&1 &
BF16=$!
CUDA_VISIBLE_DEVICES=0,1 "$P" serve --model /tmp/tk3 --device cuda --pp 2 --port 18128 >/tmp/serve_pp2.log 2>&1 &
PP2=$!
mkdir -p /tmp/uplogs
CUDA_VISIBLE_DEVICES=0,1 "$P" up --model /tmp/tk3 --port 18130 --prefill-port 18131 --decode-port 18132 --bootstrap-port 18133 \
  --chunk-size 64 --device cuda --prefill-tp 2 --decode-tp 1 --log-dir /tmp/uplogs >/tmp/up.log 2>&1 &
UP=$!
# The seed's direction: prefill on fewer ranks than decode, the KDA state sliced by head.
mkdir -p /tmp/uplogs2
CUDA_VISIBLE_DEVICES=0,1 "$P" up --model /tmp/tk3 --port 18140 --prefill-port 18141 --decode-port 18142 --bootstrap-port 18143 \
  --chunk-size 64 --device cuda --prefill-tp 1 --decode-tp 2 --log-dir /tmp/uplogs2 >/tmp/up2.log 2>&1 &
UP2=$!
# Decode across two nodes on CUDA (ranks as two processes, GPU 0 leader, GPU 1 follower):
# prefill on GPU 0, the router in front (ports 1815x).
DN=(--model /tmp/tk3 --device cuda --tp 2 --nnodes 2 --dist-init-addr 127.0.0.1:18155 --chunk-size 64)
CUDA_VISIBLE_DEVICES=1 "$P" decode "${DN[@]}" --node-rank 1 --port 18156 >/tmp/dn1.log 2>&1 &
DN1=$!
CUDA_VISIBLE_DEVICES=0 "$P" decode "${DN[@]}" --node-rank 0 --port 18152 >/tmp/dn0.log 2>&1 &
DN0=$!
CUDA_VISIBLE_DEVICES=0 "$P" prefill --model /tmp/tk3 --device cuda --port 18151 --bootstrap-port 18153 --chunk-size 64 >/tmp/pn.log 2>&1 &
PN=$!
"$P" router --pd --prefill http://127.0.0.1:18151@18153 --decode http://127.0.0.1:18152 --port 18150 >/tmp/rn.log 2>&1 &
RN=$!
for _ in $(seq 300); do
  curl -sf localhost:18123/health >/dev/null && curl -sf localhost:18124/health >/dev/null &&
    curl -sf localhost:18126/health >/dev/null && curl -sf localhost:18127/health >/dev/null && curl -sf localhost:18128/health >/dev/null && grep -q "pdserve up: ready" /tmp/up.log && grep -q "pdserve up: ready" /tmp/up2.log &&
    curl -sf localhost:18152/health >/dev/null && curl -sf localhost:18151/health >/dev/null && curl -sf localhost:18150/health >/dev/null && break
  sleep 0.2
done
REQ='{"messages": [{"role": "user", "content": "Hello there, GPU! Tell me about pages."}], "max_tokens": 32, "temperature": 0}'
for port in 18124 18123 18126 18127 18128 18130 18140 18150; do
  curl -s -m 60 -o "/tmp/reply_$port.json" -w "port $port: HTTP %{http_code}, %{time_total} s\n" "localhost:$port/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$REQ"
done
msg() { python3 -c "import json; print(json.load(open('$1'))['choices'][0]['message'])" 2>/dev/null; }
want=$(msg /tmp/reply_18124.json)
for port in 18123 18126 18127 18128 18130 18140 18150; do
  [ -n "$want" ] && [ "$(msg /tmp/reply_$port.json)" = "$want" ] && echo "port $port == serve cpu" || echo "port $port DIFFERS from serve cpu"
done
MANY=()
for i in $(seq 8); do
  R="{\"messages\": [{\"role\": \"user\", \"content\": \"Request $i: $(printf 'pages %.0s' $(seq $((i * 9))))\"}], \"max_tokens\": 24, \"temperature\": 0}"
  for port in 18130 18140 18150 18124 18126 18128; do
    curl -s -m 90 -o "/tmp/many_${port}_$i.json" localhost:$port/v1/chat/completions -H 'Content-Type: application/json' -d "$R" &
    MANY+=($!)
  done
done
wait "${MANY[@]}"
for port in 18130 18140 18150 18126 18128; do
  same=0
  for i in $(seq 8); do
    a=$(msg "/tmp/many_${port}_$i.json"); b=$(msg "/tmp/many_18124_$i.json")
    [ -n "$a" ] && [ "$a" = "$b" ] && same=$((same + 1))
  done
  echo "8 concurrent requests on port $port: $same of 8 identical to serve cpu"
done
grep -h "device:" /tmp/serve_cuda.log /tmp/serve_tp2.log /tmp/serve_pp2.log /tmp/uplogs/* /tmp/uplogs2/* /tmp/dn0.log /tmp/dn1.log 2>/dev/null | cut -c1-200
for dport in 18132 18142 18152; do curl -sf localhost:$dport/metrics | grep -E '^pdserve_decode_transfer_(succeeded|failed|bytes|runs)_total '; done
curl -sf "localhost:18131/transfers?limit=2" | head -c 600; echo
(sleep 20; kill -9 "$DN1" 2>/dev/null) &
kill -INT $UP $UP2; kill $RN $PN $DN0; kill $CPU $GPU $TP2 $BF16 $PP2; wait $UP $UP2 $RN $PN $DN0 $DN1 $CPU $GPU $TP2 $BF16 $PP2 2>/dev/null
echo "== decode step, eager vs graphs (GPU 0)"
CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN/decode_bench" --preset tiny-k3 --ctx 128 --steps 50
echo "== memcheck (GPU 1)"
for i in "${!MC[@]}"; do
  wait "${MC_PIDS[$i]}"; rc=$?
  echo "memcheck ${MC[$i]} rc=$rc: $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' "/tmp/memcheck_${MC[$i]}.log" | tr '\n' ' ')"
done
wait "$RC_PID"
echo "racecheck mla_decode_test rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' /tmp/racecheck_mla.log | tr '\n' ' ')"
for f in /tmp/memcheck_*.log /tmp/racecheck_mla.log; do echo "=== $f"; tail -60 "$f"; done >"$OUT/memcheck.log"
for f in /tmp/test_*.log; do echo "=== $f"; cat "$f"; done >"$OUT/tests.log"
{ cat /tmp/up.log /tmp/up2.log; for f in /tmp/uplogs/* /tmp/uplogs2/* /tmp/dn0.log /tmp/dn1.log /tmp/pn.log /tmp/rn.log /tmp/serve_cuda.log /tmp/serve_tp2.log /tmp/serve_pp2.log; do echo "=== $f"; tail -40 "$f"; done; } >"$OUT/e2e.log"
date -u
