#!/usr/bin/env bash
# One call on nvidia-h200-x2 for the multi-node join (issue 10): two `pdserve dist-check`
# processes, one per GPU (CUDA_VISIBLE_DEVICES=0 and =1), as node 0 and node 1 of one
# instance on 127.0.0.1. Node 0 hands the NCCL unique id to node 1 over TCP (with and without
# the cluster secret), both join NCCL as ranks 0 and 1 and run one checked all-reduce. Then a
# wrong secret (refused before NCCL) and a one-process two-GPU reference. Serving across
# nodes is run by run_serve_nodes_h200.sh.
# Usage (repository root on the device): BIN=dir OUT=dir bash run_multinode_h200.sh
set -uo pipefail
BIN=${BIN:?} OUT=${OUT:-/tmp/out}
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh "$BIN/lib"
export NCCL_DEBUG=WARN
chmod +x "$BIN"/bin/* 2>/dev/null
P="$BIN/bin/pdserve"
exec > >(tee -a "$OUT/run.log") 2>&1
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
# two PORT ARGS...: node 1 on GPU 1 in the background (it retries until node 0 listens), node 0 on GPU 0.
two() {
  local port=$1; shift
  CUDA_VISIBLE_DEVICES=1 timeout 60 "$P" dist-check --nnodes 2 --node-rank 1 --dist-init-addr "127.0.0.1:$port" "$@" >/tmp/n1.log 2>&1 &
  local f=$!
  CUDA_VISIBLE_DEVICES=0 timeout 60 "$P" dist-check --nnodes 2 --node-rank 0 --dist-init-addr "127.0.0.1:$port" "$@" >/tmp/n0.log 2>&1
  local l=$?
  wait $f; local fr=$?
  cat /tmp/n0.log /tmp/n1.log
  echo "node 0 rc=$l, node 1 rc=$fr"
}
printf 'right-secret\n' >/tmp/s_right; printf 'wrong-secret\n' >/tmp/s_wrong; chmod 600 /tmp/s_right /tmp/s_wrong
echo "== two nodes (one GPU each), no secret"; two 29511
echo "== two nodes, cluster secret, 64 MiB per rank"; two 29512 --cluster-secret-file /tmp/s_right --elements 16777216
echo "== two nodes, node 1 holds another secret (expect: refused, both exit 1)"
CUDA_VISIBLE_DEVICES=1 timeout 30 "$P" dist-check --nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:29513 --cluster-secret-file /tmp/s_wrong --timeout 20 >/tmp/w1.log 2>&1 &
w=$!
CUDA_VISIBLE_DEVICES=0 timeout 30 "$P" dist-check --nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:29513 --cluster-secret-file /tmp/s_right --timeout 5 >/tmp/w0.log 2>&1
echo "node 0 rc=$?"; wait $w; echo "node 1 rc=$?"; cat /tmp/w0.log /tmp/w1.log
echo "== one node, both GPUs in one process (reference)"
CUDA_VISIBLE_DEVICES=0,1 timeout 60 "$P" dist-check --nnodes 1 --elements 16777216; echo "rc=$?"
date -u
