#!/usr/bin/env bash
# One call on nvidia-h200-x2 for a node lost mid-step (issue 10): `pdserve serve --device cuda
# --tp 2 --nnodes 2` as two processes on 127.0.0.1 (CUDA_VISIBLE_DEVICES=0 leader, =1
# follower), a long request in flight (max_tokens 8000, ignore_eos), then
#   A: the follower is SIGKILLed: the request must end with an error within seconds, /health
#      answer 503, the leader stay alive and exit 0 on SIGTERM;
#   B: the leader is SIGKILLed: the follower must exit non-zero within seconds.
# Usage (repository root on the device): BIN=dir OUT=dir bash run_serve_nodes_lost_h200.sh
# (DEVICE=cpu runs the same checks on the CPU backend, collectives over TCP, without a GPU.)
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib"
export NCCL_DEBUG=WARN
chmod +x "$BIN"/bin/* 2>/dev/null
P="$BIN/bin/pdserve"
exec > >(tee -a "$OUT/run.log") 2>&1
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
M=/tmp/tiny-k3-wide
"$P" make-model --preset tiny-k3-wide --out "$M" >/dev/null || { echo "make-model failed"; exit 1; }
COMMON=(--model "$M" --host 127.0.0.1 --device "${DEVICE:-cuda}" --page-size 16 --max-running 4 --tp 2 --nnodes 2 --dist-timeout 60)
FAILS=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; FAILS=$((FAILS + 1)); fi; }
now() { date +%s.%N; }
since() { awk "BEGIN{printf \"%.2f\", $(now) - $1}"; }
# wait_exit PID SECS: waits at most SECS for PID (a child) to end; its exit status, or 200 if it
# was still running (it is then SIGKILLed so the run goes on).
wait_exit() {
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }; sleep 0.1; done
  echo "pid $1 still running after $2 s: SIGKILL"; kill -KILL "$1"; wait "$1"; return 200
}
wait_port() {
  for _ in $(seq 600); do
    p=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$1" 2>/dev/null | sed 's/.*://')
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  return 1
}
# long_request PORT FILE: a non-streamed 8000-token completion; FILE gets "status seconds body".
long_request() {
  python3 - "$1" "$2" <<'PY' &
import json, sys, time, urllib.request, urllib.error
port, path = sys.argv[1], sys.argv[2]
body = json.dumps({"prompt": "the instance loses a node", "max_tokens": 8000, "ignore_eos": True, "temperature": 0}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
t = time.time()
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        status, text = r.status, r.read().decode()
except urllib.error.HTTPError as e:
    status, text = e.code, e.read().decode()
except Exception as e:
    status, text = -1, repr(e)
open(path, "w").write(f"{status} {time.time():.3f} {text[:600]}\n")
PY
}
# start NAME PORT: leader and follower; sets L and F.
start() {
  CUDA_VISIBLE_DEVICES=1 "$P" serve "${COMMON[@]}" --node-rank 1 --dist-init-addr "127.0.0.1:$2" >"$OUT/$1-node1.log" 2>&1 &
  F=$!
  CUDA_VISIBLE_DEVICES=0 "$P" serve "${COMMON[@]}" --node-rank 0 --dist-init-addr "127.0.0.1:$2" --port $(($2 - 10000)) \
    >"$OUT/$1-node0.log" 2>&1 &
  L=$!
  wait_port "$OUT/$1-node0.log" >/dev/null && return 0
  echo "$1: the leader never listened"; tail -5 "$OUT/$1-node0.log" "$OUT/$1-node1.log"; kill -KILL "$L" "$F"; return 1
}

echo "== A: the follower dies mid-request"
if start a 29531; then
  long_request 19531 "$OUT/a-reply.txt"; c=$!
  sleep 2
  check "A: the request is still running when the follower is killed" "kill -0 $c 2>/dev/null"
  t0=$(now); kill -KILL "$F"; wait "$F" 2>/dev/null
  wait_exit "$c" 60; dt=$(since "$t0")
  read -r status _ rest <"$OUT/a-reply.txt"; echo "A: reply status $status ${dt} s after the kill: ${rest:0:300}"
  check "A: the request ended with an error" "[ '$status' -ge 500 ] 2>/dev/null || grep -q 'lost one of its nodes' $OUT/a-reply.txt"
  check "A: the error names the lost node" "grep -q 'lost one of its nodes' $OUT/a-reply.txt"
  check "A: it ended within 10 s of the kill" "awk 'BEGIN{exit !($dt < 10)}'"
  h=$(curl -s -o "$OUT/a-health.json" -w '%{http_code}' --max-time 5 http://127.0.0.1:19531/health); echo "A: /health $h $(cat "$OUT/a-health.json")"
  check "A: /health answers 503" "[ '$h' = 503 ]"
  check "A: the leader is still alive" "kill -0 $L 2>/dev/null"
  t0=$(now); kill -TERM "$L"; wait_exit "$L" 30; rc=$?
  echo "A: leader rc=$rc $(since "$t0") s after SIGTERM"
  check "A: the leader exits 0 on SIGTERM" "[ $rc = 0 ]"
  tail -4 "$OUT/a-node0.log"
else FAILS=$((FAILS + 1)); fi

echo "== B: the leader dies mid-request"
if start b 29532; then
  long_request 19532 "$OUT/b-reply.txt"; c=$!
  sleep 2
  check "B: the request is still running when the leader is killed" "kill -0 $c 2>/dev/null"
  t0=$(now); kill -KILL "$L"; wait "$L" 2>/dev/null
  wait_exit "$F" 30; rc=$?; dt=$(since "$t0")
  echo "B: follower rc=$rc ${dt} s after the leader's SIGKILL"
  check "B: the follower exits non-zero by itself" "[ $rc != 0 ] && [ $rc != 200 ]"
  check "B: within 10 s" "awk 'BEGIN{exit !($dt < 10)}'"
  tail -3 "$OUT/b-node1.log"
  wait_exit "$c" 30; cut -c1-200 "$OUT/b-reply.txt"
else FAILS=$((FAILS + 1)); fi
echo "FAILS=$FAILS"; date -u
