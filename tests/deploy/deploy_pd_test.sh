#!/usr/bin/env bash
# scripts/deploy_pd.sh on this host (local mode): preflight passes a sound topology and finds
# a missing model shard, a busy port and a page size mismatch, each with its message; then a
# start / status / chat request / logs / stop round trip, and a second stop that is a no-op.
# Uses the real prefill/decode roles when the binary has them, else tests/deploy/fake_roles.sh.
set -euo pipefail
REAL=$(readlink -f "${1:?usage: deploy_pd_test.sh PDSERVE_BINARY}")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/pds-deploy-test.XXXXXX)
export RUN_ROOT=$W/runs
busy_pid=""
cfg=""

cleanup() {
  [ -z "$busy_pid" ] || kill "$busy_pid" 2>/dev/null || true
  [ -z "$cfg" ] || bash "$SRC/scripts/deploy_pd.sh" -c "$cfg" stop >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

if "$REAL" --help | grep -Eq '^ +prefill ' && "$REAL" --help | grep -Eq '^ +decode '; then
  export PDSERVE=$REAL
else
  echo "note: this pdserve has no prefill/decode yet; they run as pdserve serve (fake_roles.sh)"
  export PDSERVE=$SRC/tests/deploy/fake_roles.sh PDSERVE_REAL=$REAL
fi

"$REAL" make-model --preset tiny-k3 --out "$W/m" >/dev/null
read -r P_PORT D_PORT B_PORT R_PORT < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')

write_config() {  # file model [extra lines]
  cat >"$1" <<CFG
MODEL_PATH=$2
DEPLOY_MODE=local
BIND_HOST=127.0.0.1
GPUS_PER_NODE=0
PREFILL_NODES=127.0.0.1
PREFILL_PORT=$P_PORT
BOOTSTRAP_PORT=$B_PORT
DECODE_NODES=127.0.0.1
DECODE_PORT=$D_PORT
PAGE_SIZE=64
ROUTER_PORT=$R_PORT
READY_TIMEOUT_S=120
STOP_GRACE_S=10
${3:-}
CFG
}

deploy() { bash "$SRC/scripts/deploy_pd.sh" -c "$cfg" "$@"; }

expect_problem() {  # what needle
  local out rc=0
  out=$(deploy preflight 2>&1) || rc=$?
  [ "$rc" -ne 0 ] || fail "preflight passed with $1: $out"
  grep -qF -- "$2" <<<"$out" || fail "preflight with $1 did not say '$2':"$'\n'"$out"
  ok "preflight finds $1"
}

# -- preflight --
cfg=$W/good.env
write_config "$cfg" "$W/m"
out=$(deploy preflight) || fail "preflight of a sound topology: $out"
ok "preflight passes a sound topology"

cp -r "$W/m" "$W/broken"
rm "$W/broken/model-00002-of-00003.safetensors"
cfg=$W/shard.env
write_config "$cfg" "$W/broken"
expect_problem "a missing shard" \
  "preflight: model shard $W/broken/model-00002-of-00003.safetensors is missing (named by model.safetensors.index.json)"

cfg=$W/good.env
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(600)' "$D_PORT" &
busy_pid=$!
for _ in $(seq 50); do ss -ltn "sport = :$D_PORT" | grep -q LISTEN && break; sleep 0.1; done
expect_problem "a busy port" "preflight: port $D_PORT (DECODE_PORT) on 127.0.0.1 is already in use"
kill "$busy_pid"
wait "$busy_pid" 2>/dev/null || true
busy_pid=""

cfg=$W/pages.env
write_config "$cfg" "$W/m" "DECODE_PAGE_SIZE=32"
expect_problem "a page size mismatch" \
  "preflight: $cfg: page size mismatch: PREFILL_PAGE_SIZE=64 but DECODE_PAGE_SIZE=32 (decode refuses every transfer from a prefill with another page size)"
out=$(deploy start 2>&1) && fail "start accepted a page size mismatch"
grep -qF "page size mismatch" <<<"$out" || fail "start did not name the mismatch: $out"
ok "start refuses a page size mismatch"

# -- start / status / request / logs / stop --
cfg=$W/good.env
out=$(RUN_ID=round-trip deploy start 2>&1) || fail "start: $out"$'\n'"$(deploy logs 2>&1 || true)"
grep -q "ready: send OpenAI requests to http://127.0.0.1:$R_PORT/v1" <<<"$out" || fail "start did not print the URL: $out"
for f in config.env manifest.txt launch/prefill-0.sh launch/decode-0.sh launch/router-0.sh logs/router-0.log procs.tsv; do
  [ -s "$RUN_ROOT/round-trip/$f" ] || fail "run directory lacks $f"
done
ok "start: run directory with config, manifest, launch commands and logs"

out=$(deploy status) || fail "status of a healthy run: $out"
for n in prefill-0 decode-0 router-0; do
  grep -Eq "^$n +127.0.0.1 .* running +ok" <<<"$out" || fail "status does not show $n running and healthy: $out"
done
[ "$(grep -c ' healthy ' <<<"$out")" -eq 2 ] || fail "status lacks the router's view of both workers: $out"
ok "status shows each daemon and the router's view"

resp=$(curl -sf "http://127.0.0.1:$R_PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8, "temperature": 0}') ||
  fail "chat request through the router failed"
grep -q '"completion_tokens":8' <<<"$resp" || fail "unexpected answer: $resp"
ok "a chat request through the router"

deploy logs prefill | grep -q "pdserve: listening on" || fail "logs prefill lacks the listening line"
ok "logs"

pids=$(cut -f5 "$RUN_ROOT/round-trip/procs.tsv")
deploy stop >/dev/null || fail "stop"
for p in $pids; do
  ! kill -0 "$p" 2>/dev/null || fail "process $p survived stop"
done
for p in $P_PORT $D_PORT $R_PORT; do
  ! ss -ltn "sport = :$p" | grep -q LISTEN || fail "port $p still listening after stop"
done
out=$(deploy status 2>&1) && fail "status of a stopped run says healthy: $out"
grep -q "was stopped" <<<"$out" || fail "status does not say the run was stopped: $out"
grep -q "(router not answering)" <<<"$out" || fail "status does not say the router is not answering: $out"
! grep -q Traceback <<<"$out" || fail "status of a stopped run prints a Python traceback: $out"
deploy stop >/dev/null || fail "a second stop failed"
ok "stop is clean and idempotent"
echo "deploy_pd_test: all passed"
