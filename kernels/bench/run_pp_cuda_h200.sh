#!/usr/bin/env bash
# One call on nvidia-h200-x2 for pipeline parallelism on the CUDA backend (issue 10):
# cuda_pp_test (PP2 on two GPUs == one GPU bit for bit, a stage failing one request, a failure
# crossing the NCCL link), pp_bench --model (one prefill forward, one GPU vs two stages), then
# end to end: `serve --device cuda --pp 2` and `pdserve up --device cuda --prefill-pp 2` (the
# router in front) answering compare_replies.py's greedy prompts, compared with a CPU `serve`
# and a one-GPU `serve --device cuda`; the refusals of --pp on decode and with --tp 2 on CUDA;
# then the existing GPU tests (cuda_forward_test, cuda_tp_test, pd_device_test) as a
# regression check of the shared CudaModel code. (CudaGolden in cuda_forward_test reads
# tests/fixtures at the build tree's source path, which a carried binary does not find.)
# Usage (repository root on the device): BIN=dir OUT=dir [SRC_LINK=/work/wt-x] bash kernels/bench/run_pp_cuda_h200.sh
# BIN holds the binaries (stripped), lib/ and compare_replies.py (built elsewhere).
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# SRC_LINK=the build tree's path: cuda_forward_test's golden cases read tests/fixtures there.
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib" /work/main ${SRC_LINK:+"$SRC_LINK"}
export CUDA_VISIBLE_DEVICES=0,1
chmod +x "$BIN"/* 2>/dev/null
exec > >(tee -a "$OUT/run.log") 2>&1
L=/tmp/pplogs  # every log, gathered into four files under $OUT at the end (8 come back at most)
mkdir -p "$L/uplogs"
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
summary() {  # test log -> one line and the failures
  echo "$1 rc=$2 $(grep -cE '^\[       OK' "$3") ok, $(grep -cE '^\[  SKIPPED' "$3") skipped, $(grep -cE '^\[  FAILED  \].*\([0-9]+ ms\)$' "$3") failed"
  grep -E "^\[  FAILED|Failure|Expected|Which is|error|normalised|pipeline stage" "$3" | head -30
}
echo "== cuda_pp_test (GPUs 0,1)"
timeout 100 "$BIN/cuda_pp_test" >"$L/cuda_pp_test.log" 2>&1
summary cuda_pp_test $? "$L/cuda_pp_test.log"

echo "== end to end"
P="$BIN/pdserve"
"$P" make-model --preset tiny-k3 --out /tmp/tk3 >/dev/null || echo "make-model failed"
"$P" serve --model /tmp/tk3 --port 18224 >"$L/serve_cpu.log" 2>&1 &
CPU=$!
"$P" serve --model /tmp/tk3 --device cuda --port 18225 >"$L/serve_cuda1.log" 2>&1 &
GPU1=$!
"$P" serve --model /tmp/tk3 --device cuda --pp 2 --port 18223 >"$L/serve_cuda_pp2.log" 2>&1 &
PP=$!
"$P" up --model /tmp/tk3 --device cuda --prefill-pp 2 --port 18230 --prefill-port 18231 --decode-port 18232 --bootstrap-port 18233 \
  --chunk-size 64 --log-dir "$L/uplogs" >"$L/up.log" 2>&1 &
UP=$!
for _ in $(seq 200); do
  curl -sf localhost:18224/health >/dev/null && curl -sf localhost:18225/health >/dev/null && curl -sf localhost:18223/health >/dev/null &&
    grep -q "pdserve up: ready" "$L/up.log" && break
  sleep 0.2
done
for port in 18224 18225 18223 18230; do
  timeout 20 python3 "$BIN/compare_replies.py" query $port >"/tmp/replies_$port.json" 2>"/tmp/replies_$port.err" || {
    echo "port $port: query failed"; tail -3 "/tmp/replies_$port.err"; }
done
C="$BIN/compare_replies.py"
python3 "$C" same "serve cuda --pp 2 vs serve cpu" /tmp/replies_18223.json /tmp/replies_18224.json
python3 "$C" same "serve cuda --pp 2 vs serve cuda (one GPU)" /tmp/replies_18223.json /tmp/replies_18225.json
python3 "$C" same "up --device cuda --prefill-pp 2 (router) vs serve cpu" /tmp/replies_18230.json /tmp/replies_18224.json
python3 "$C" same "up --device cuda --prefill-pp 2 (router) vs serve cuda (one GPU)" /tmp/replies_18230.json /tmp/replies_18225.json
grep -h "device:" "$L/serve_cuda_pp2.log" "$L"/uplogs/* 2>/dev/null | cut -c1-240
curl -sf localhost:18232/metrics | grep -E '^pdserve_decode_transfer_(succeeded|failed|bytes)_total '
kill -INT $UP; kill $CPU $GPU1 $PP; wait $UP $CPU $GPU1 $PP 2>/dev/null
echo "== refusals"
timeout 20 "$P" decode --model /tmp/tk3 --device cuda --pp 2 --port 18240 2>&1 | tail -2
timeout 20 "$P" serve --model /tmp/tk3 --device cuda --pp 2 --tp 2 --port 18241 2>&1 | tail -2
CUDA_VISIBLE_DEVICES=0 timeout 20 "$P" serve --model /tmp/tk3 --device cuda --pp 2 --port 18242 2>&1 | tail -2

echo "== pp_bench --model (GPUs 0,1)"
timeout 50 "$BIN/pp_bench" --reps 10 --model /tmp/tk3 --only-forward 2>&1 | tee "$OUT/pp_bench.log"
echo "pp_bench rc=${PIPESTATUS[0]}"

echo "== regression: the other GPU tests"
for b in cuda_forward_test cuda_tp_test pd_device_test; do
  left=$((165 - SECONDS))  # the call's limit is 180 s: what is left, not past it
  [ $left -lt 15 ] && { echo "$b: not run (${SECONDS} s used)"; continue; }
  timeout $((left < 45 ? left : 45)) "$BIN/$b" >"$L/$b.log" 2>&1
  summary $b $? "$L/$b.log"
done
for f in "$L"/*_test.log; do echo "=== $f"; cat "$f"; done >"$OUT/tests.log"
for f in "$L"/*.log "$L"/uplogs/*; do case $f in *_test.log) continue ;; esac; echo "=== $f"; tail -60 "$f"; done >"$OUT/e2e.log"
date -u
