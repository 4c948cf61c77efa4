#!/usr/bin/env bash
# One call on nvidia-h200-x2 for serving across nodes (issue 10): `pdserve serve --device cuda
# --tp 2 --nnodes 2` as two processes, one GPU each (CUDA_VISIBLE_DEVICES=0 leader, =1
# follower) on 127.0.0.1, against a one-process two-GPU server and a one-GPU server on the
# same tiny model; the replies (text + logprobs, greedy) are compared by compare_replies.py.
# Then the leader stops (SIGTERM): the follower must exit 0.
# Usage (repository root on the device): BIN=dir OUT=dir bash run_serve_nodes_h200.sh
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib"
export NCCL_DEBUG=WARN
chmod +x "$BIN"/bin/* 2>/dev/null
P="$BIN/bin/pdserve"
HERE=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$OUT/run.log") 2>&1
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
M=/tmp/tiny-k3-wide
"$P" make-model --preset tiny-k3-wide --out "$M" >/dev/null || { echo "make-model failed"; exit 1; }
COMMON=(--model "$M" --host 127.0.0.1 --device cuda --page-size 16 --max-running 4)

# wait_port LOG: the port from "pdserve: listening on http://127.0.0.1:PORT" (60 s at most).
wait_port() {
  for _ in $(seq 600); do
    p=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$1" 2>/dev/null | sed 's/.*://')
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  return 1
}
# query NAME PORT: the replies of one server into $OUT/NAME.json.
query() { python3 "$HERE/compare_replies.py" query "$2" >"$OUT/$1.json" && echo "$1: $(wc -c <"$OUT/$1.json") bytes of replies"; }

echo "== one GPU, --tp 1"
CUDA_VISIBLE_DEVICES=0 "$P" serve "${COMMON[@]}" --tp 1 --port 18101 >"$OUT/tp1.log" 2>&1 &
s=$!; wait_port "$OUT/tp1.log" >/dev/null && query tp1 18101; kill "$s"; wait "$s"

echo "== two GPUs in one process, --tp 2"
CUDA_VISIBLE_DEVICES=0,1 "$P" serve "${COMMON[@]}" --tp 2 --port 18102 >"$OUT/tp2.log" 2>&1 &
s=$!; wait_port "$OUT/tp2.log" >/dev/null && query tp2 18102; kill "$s"; wait "$s"

echo "== two processes, one GPU each: --tp 2 --nnodes 2"
CUDA_VISIBLE_DEVICES=1 timeout 150 "$P" serve "${COMMON[@]}" --tp 2 --nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:29521 \
  --dist-timeout 60 >"$OUT/node1.log" 2>&1 &
f=$!
CUDA_VISIBLE_DEVICES=0 timeout 150 "$P" serve "${COMMON[@]}" --tp 2 --nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:29521 \
  --dist-timeout 60 --port 18103 >"$OUT/node0.log" 2>&1 &
l=$!
if wait_port "$OUT/node0.log" >/dev/null; then query nodes 18103; else echo "the leader never listened"; fi
kill -TERM "$l"; wait "$l"; echo "leader rc=$?"
wait "$f"; echo "follower rc=$? (want 0)"
tail -3 "$OUT/node1.log"
grep -h "device:" "$OUT/node0.log" "$OUT/node1.log" | head -4
python3 "$HERE/compare_replies.py" compare "$OUT/nodes.json" "$OUT/tp2.json" "$OUT/tp1.json"
date -u
