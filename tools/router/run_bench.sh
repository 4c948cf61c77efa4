#!/usr/bin/env bash
# Router vs nginx in front of the same fixed-answer backend, in one run on this machine.
# usage: tools/router/run_bench.sh BUILD_DIR   (needs nginx: apt-get install -y nginx-light)
set -euo pipefail
BUILD=${1:-/work/build-router}
BENCH=$BUILD/tools/router/router_bench
WORK=$(mktemp -d /tmp/router-bench.XXXX)
BACKEND=18001 ROUTER=18002 NGINX=18003
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; nginx -p "$WORK" -c "$WORK/nginx.conf" -s stop 2>/dev/null || true; }
trap cleanup EXIT

$BENCH backend --port $BACKEND --events 16 2>/dev/null & pids+=($!)
# The router library as `pdserve router --worker URL` runs it (router_bench router wraps it so
# the bench does not need the whole pdserve binary).
$BENCH router --port $ROUTER --worker http://127.0.0.1:$BACKEND & pids+=($!)
cat > "$WORK/nginx.conf" <<NGX
worker_processes auto;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream backend { server 127.0.0.1:$BACKEND; keepalive 256; }
  server {
    listen 127.0.0.1:$NGINX;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;   # stream SSE as it comes, like the router
    }
  }
}
NGX
nginx -p "$WORK" -c "$WORK/nginx.conf" & pids+=($!)
sleep 1

for stream in "" "--stream"; do
  for c in 1 32; do
    n=$([ "$c" = 1 ] && echo 5000 || echo 40000)
    for target in direct:$BACKEND router:$ROUTER nginx:$NGINX; do
      name=${target%%:*} port=${target##*:}
      printf '%-7s ' "$name"
      $BENCH load --port "$port" --concurrency $c --requests "$n" --warmup 500 $stream
    done
  done
done
