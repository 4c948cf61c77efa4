#!/usr/bin/env bash
# The README's run command. On a fresh machine: installs dependencies, builds pdserve (CPU
# backend), writes the tiny Kimi-K3 model, starts `pdserve up` (a prefill server, a decode
# server and the MiniLB router on port 31000, the KV moving prefill -> decode over the TCP
# transport), sends a real chat request through the router, runs the validation suite at
# small scale against it, and stops everything. Work files go to ${WORK_DIR}.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK_DIR=${WORK_DIR:-/tmp/pdserve-quickstart}
ROUTER_PORT=${ROUTER_PORT:-31000}
PREFILL_PORT=${PREFILL_PORT:-30001}
DECODE_PORT=${DECODE_PORT:-30002}
BOOTSTRAP_PORT=${BOOTSTRAP_PORT:-8998}
mkdir -p "$WORK_DIR"

bash scripts/setup.sh
bash scripts/build.sh
PDSERVE="$ROOT/${BUILD_DIR:-build}/src/pdserve"
MODEL="$WORK_DIR/tiny-k3"
"$PDSERVE" make-model --preset tiny-k3 --out "$MODEL"

LOG_DIR="$WORK_DIR/logs"
rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"
"$PDSERVE" up --model "$MODEL" --port "$ROUTER_PORT" --prefill-port "$PREFILL_PORT" --decode-port "$DECODE_PORT" \
  --bootstrap-port "$BOOTSTRAP_PORT" --log-dir "$LOG_DIR" >"$WORK_DIR/up.log" 2>&1 &
UP_PID=$!
cleanup() {
  kill -INT "$UP_PID" 2>/dev/null || true  # up stops router, decode and prefill, then exits
  wait "$UP_PID" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
for _ in $(seq 1 300); do
  grep -q "pdserve up: ready" "$WORK_DIR/up.log" 2>/dev/null && break
  if ! kill -0 "$UP_PID" 2>/dev/null; then
    echo "quickstart: pdserve up exited; see $WORK_DIR/up.log and $LOG_DIR" >&2
    cat "$WORK_DIR/up.log" >&2
    exit 1
  fi
  sleep 0.2
done
grep -q "pdserve up: ready" "$WORK_DIR/up.log" || { echo "quickstart: pdserve up not ready; see $WORK_DIR/up.log" >&2; exit 1; }
echo "quickstart: prefill :$PREFILL_PORT (bootstrap :$BOOTSTRAP_PORT) + decode :$DECODE_PORT behind the router on :$ROUTER_PORT"

echo "== a chat request through the router =="
curl -sf "http://127.0.0.1:$ROUTER_PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hello, Kimi!"}], "max_tokens": 16, "temperature": 0}'
echo

echo "== validation suite, scaled down for the CPU backend =="
RUN_ID=${RUN_ID:-quickstart-$(date +%Y%m%d-%H%M%S)} BASE_URL="http://127.0.0.1:$ROUTER_PORT" SCALE=${SCALE:-128} \
  LOG_DIRS="$LOG_DIR" PDSERVE_BIN="$PDSERVE" RESULTS_ROOT="$WORK_DIR/results" \
  bash scripts/run_pd_validation.sh
echo "== the KV moved prefill -> decode =="
curl -sf "http://127.0.0.1:$DECODE_PORT/metrics" | grep -E '^pdserve_decode_transfer_(succeeded|failed|bytes)_total '
echo "quickstart: done; results under $WORK_DIR/results"
