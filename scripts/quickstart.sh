#!/usr/bin/env bash
# The README's run command. On a fresh machine: installs dependencies, builds pdserve (CPU
# backend), writes the tiny Kimi-K3 model, starts `pdserve serve` behind the MiniLB router on
# port 31000, sends a real chat request through the router, runs the validation suite at
# small scale against it, and stops everything. Work files go to ${WORK_DIR}.
#
# The prefill/decode roles (issue 5) will replace the single `serve` worker here.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK_DIR=${WORK_DIR:-/tmp/pdserve-quickstart}
ROUTER_PORT=${ROUTER_PORT:-31000}
SERVE_PORT=${SERVE_PORT:-30001}
mkdir -p "$WORK_DIR"

bash scripts/setup.sh
bash scripts/build.sh
PDSERVE="$ROOT/${BUILD_DIR:-build}/src/pdserve"
MODEL="$WORK_DIR/tiny-k3"
"$PDSERVE" make-model --preset tiny-k3 --out "$MODEL"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

wait_healthy() {  # url name
  for _ in $(seq 1 100); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "quickstart: $2 did not become healthy; see $WORK_DIR/$2.log" >&2
  exit 1
}

"$PDSERVE" serve --model "$MODEL" --host 127.0.0.1 --port "$SERVE_PORT" >"$WORK_DIR/serve.log" 2>&1 &
pids+=($!)
wait_healthy "http://127.0.0.1:$SERVE_PORT" serve
"$PDSERVE" router --worker "http://127.0.0.1:$SERVE_PORT" --port "$ROUTER_PORT" >"$WORK_DIR/router.log" 2>&1 &
pids+=($!)
wait_healthy "http://127.0.0.1:$ROUTER_PORT" router
echo "quickstart: pdserve serve on :$SERVE_PORT behind the router on :$ROUTER_PORT"

echo "== a chat request through the router =="
curl -sf "http://127.0.0.1:$ROUTER_PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hello, Kimi!"}], "max_tokens": 16, "temperature": 0}'
echo

echo "== validation suite, scaled down for the CPU backend =="
RUN_ID=${RUN_ID:-quickstart-$(date +%Y%m%d-%H%M%S)} BASE_URL="http://127.0.0.1:$ROUTER_PORT" SCALE=${SCALE:-128} \
  LOG_DIRS="$WORK_DIR/serve.log $WORK_DIR/router.log" PDSERVE_BIN="$PDSERVE" RESULTS_ROOT="$WORK_DIR/results" \
  bash scripts/run_pd_validation.sh
echo "quickstart: done; results under $WORK_DIR/results"
