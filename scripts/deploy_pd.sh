#!/usr/bin/env bash
# The one lifecycle entry point of a prefill/decode deployment (as the seed's deploy_pd.sh).
#
#   scripts/deploy_pd.sh [-c CONFIG] build-image | preflight | start | status | stop | logs [NAME]
#
# CONFIG (default configs/one-host.env) is a topology file (configs/README.md). DEPLOY_MODE
# (from the file, or the environment) is `local` (every process on this host) or `ssh` (each
# process on its node over ssh; with IMAGE set, in a container of that image).
# start writes runs/RUN_ID/ (RUN_ID from the environment or a timestamp): the config, a
# manifest, launch/NAME.sh (the exact command of each process), logs/NAME.log (local mode;
# on the node in ssh mode) and procs.tsv; runs/current points to it. status, stop and logs
# act on runs/current unless RUN_ID is given. stop is idempotent.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

CONFIG=${CONFIG:-$ROOT/configs/one-host.env}
while getopts "c:h" opt; do
  case $opt in
    c) CONFIG=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
CMD=${1:-}
[ -n "$CMD" ] || usage
shift

# The local binary: print-launch and preflight, and every role in local mode.
PDSERVE=${PDSERVE:-$ROOT/${BUILD_DIR:-build}/src/pdserve}
[ -x "$PDSERVE" ] || { echo "deploy_pd: $PDSERVE is not built (bash scripts/build.sh, or set PDSERVE)" >&2; exit 1; }
[ -r "$CONFIG" ] || { echo "deploy_pd: config $CONFIG cannot be read" >&2; exit 1; }

# The environment may override these keys of the file.
env_mode=${DEPLOY_MODE:-}
env_run_root=${RUN_ROOT:-}
env_image=${IMAGE:-}
# The file is plain KEY=VALUE that pdserve validated (print-launch below), so sourcing it
# only sets variables.
# shellcheck source=/dev/null
. "$CONFIG"
DEPLOY_MODE=${env_mode:-${DEPLOY_MODE:-local}}
RUN_ROOT=${env_run_root:-${RUN_ROOT:-$ROOT/runs}}
IMAGE=${env_image:-${IMAGE:-}}
PDSERVE_BIN=${PDSERVE_BIN:-pdserve}  # on the nodes (ssh mode without IMAGE)
READY_TIMEOUT_S=${READY_TIMEOUT_S:-600}
STOP_GRACE_S=${STOP_GRACE_S:-15}
MAX_CLOCK_SKEW_MS=${MAX_CLOCK_SKEW_MS:-500}
GPU_IDLE_MIB=${GPU_IDLE_MIB:-2048}
read -ra SSH_ARGS <<<"${SSH_OPTS:--o BatchMode=yes -o ConnectTimeout=10}"
read -ra DOCKER_ARGS <<<"${DOCKER_RUN_ARGS:-}"
case $DEPLOY_MODE in local | ssh) ;; *) echo "deploy_pd: DEPLOY_MODE=$DEPLOY_MODE must be local or ssh" >&2; exit 2 ;; esac

log() { echo "deploy_pd: $*"; }
die() { echo "deploy_pd: $*" >&2; exit 1; }

# Runs a shell command on a node (here in local mode).
# shellcheck disable=SC2029  # the command is built here on purpose
on_node() {  # node command
  if [ "$DEPLOY_MODE" = local ]; then bash -c "$2"; else ssh "${SSH_ARGS[@]}" "$1" "$2"; fi
}

all_nodes() {
  local n
  for n in ${PREFILL_NODES:-} ${DECODE_NODES:-} ${ROUTER_NODE:-}; do echo "$n"; done | awk '!seen[$0]++'
}

run_dir_of() {  # RUN_ID or current
  if [ -n "${RUN_ID:-}" ]; then echo "$RUN_ROOT/$RUN_ID"; else readlink -f "$RUN_ROOT/current" 2>/dev/null || true; fi
}

# ---- build-image ---------------------------------------------------------------------------
cmd_build_image() {
  command -v docker >/dev/null || die "build-image: docker is not installed on this host"
  local image=${IMAGE:-pdserve:latest}
  docker build -f "$ROOT/docker/Dockerfile.pd" -t "$image" "$ROOT"
  if [ "$DEPLOY_MODE" = ssh ] && [ "${DISTRIBUTE:-0}" = 1 ]; then
    local n
    for n in $(all_nodes); do
      log "loading $image on $n"
      docker save "$image" | ssh "${SSH_ARGS[@]}" "$n" docker load
    done
  fi
}

# ---- preflight -----------------------------------------------------------------------------
PROBLEMS=0
problem() { echo "preflight: $*"; PROBLEMS=$((PROBLEMS + 1)); }

preflight_pdserve() {  # topology, model directory and ports, by pdserve itself on each node
  local out n q
  if [ "$DEPLOY_MODE" = local ]; then
    out=$("$PDSERVE" preflight --config "$CONFIG" --all-nodes) || true
    while read -r line; do
      case $line in "" | *" checks passed") ;; "preflight: note: "*) echo "$line" ;; *) problem "${line#preflight: }" ;; esac
    done <<<"$out"
    return
  fi
  q=$(printf '%q' "$(cat "$CONFIG")")
  for n in $(all_nodes); do
    local tmp="/tmp/pdserve-preflight-$$.env" run
    if [ -n "$IMAGE" ]; then
      run="docker run --rm --network host -v $MODEL_PATH:$MODEL_PATH:ro -v $tmp:$tmp:ro $IMAGE preflight --config $tmp --node $n"
    else
      run="$PDSERVE_BIN preflight --config $tmp --node $n"
    fi
    out=$(on_node "$n" "printf '%s\n' $q > $tmp && $run; rm -f $tmp" 2>&1) || true
    while read -r line; do
      case $line in "" | *" checks passed") ;; "preflight: note: "*) echo "$n: $line" ;; *) problem "$n: ${line#preflight: }" ;; esac
    done <<<"$out"
  done
}

preflight_gpus() {  # node
  local n=$1 out idx mib count=0
  if ! out=$(on_node "$n" "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits" 2>&1); then
    problem "$n: nvidia-smi failed, no GPU visible: ${out%%$'\n'*}"
    return
  fi
  while IFS=', ' read -r idx mib; do
    [ -n "$idx" ] || continue
    count=$((count + 1))
    [ "${mib%.*}" -le "$GPU_IDLE_MIB" ] || problem "$n: GPU $idx is not idle ($mib MiB in use, GPU_IDLE_MIB=$GPU_IDLE_MIB)"
  done <<<"$out"
  [ "$count" -ge "$GPUS_PER_NODE" ] || problem "$n: $count GPUs visible, GPUS_PER_NODE=$GPUS_PER_NODE"
  out=$(on_node "$n" "nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader" 2>/dev/null || true)
  [ -z "$out" ] || problem "$n: processes already use the GPUs: $(tr '\n' ';' <<<"$out")"
}

preflight_nics() {  # node
  local n=$1 nic out
  for nic in ${RDMA_NICS//,/ }; do
    if ! out=$(on_node "$n" "ibv_devinfo -d $nic" 2>&1); then
      problem "$n: RDMA NIC $nic not found (ibv_devinfo -d $nic: ${out%%$'\n'*})"
    elif ! grep -q PORT_ACTIVE <<<"$out"; then
      problem "$n: RDMA NIC $nic has no active port (ibv_devinfo -d $nic shows no PORT_ACTIVE)"
    fi
  done
}

preflight_versions() {  # the same driver and NCCL on every GPU node
  local n drv nccl drivers="" ncclv=""
  for n in "$@"; do
    drv=$(on_node "$n" "nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1" 2>/dev/null || echo none)
    drivers+="$n=$drv "
    if [ -z "$IMAGE" ]; then  # in the image NCCL is the same everywhere
      nccl=$(on_node "$n" "dpkg-query -W -f='\${Version}' libnccl2" 2>/dev/null || echo none)
      [ "$nccl" != none ] || problem "$n: NCCL (libnccl2) is not installed"
      ncclv+="$n=$nccl "
    fi
  done
  [ "$(tr ' ' '\n' <<<"$drivers" | sed -n 's/.*=//p' | sort -u | wc -l)" -le 1 ] || problem "GPU driver versions differ: $drivers"
  [ "$(tr ' ' '\n' <<<"$ncclv" | sed -n 's/.*=//p' | sort -u | wc -l)" -le 1 ] || problem "NCCL versions differ: $ncclv"
}

preflight_clocks() {  # skew of each node against this host, half the round trip allowed for
  local n before remote after skew
  for n in $(all_nodes); do
    before=$(date +%s%3N)
    remote=$(on_node "$n" "date +%s%3N" 2>/dev/null) || { problem "$n: cannot run date over ssh"; continue; }
    after=$(date +%s%3N)
    skew=$((remote - (before + after) / 2))
    [ "${skew#-}" -le "$MAX_CLOCK_SKEW_MS" ] ||
      problem "$n: clock is off by $skew ms against $(hostname) (MAX_CLOCK_SKEW_MS=$MAX_CLOCK_SKEW_MS); check chrony/ntp"
  done
}

cmd_preflight() {
  local n gpu_nodes=()
  preflight_pdserve
  if [ "${GPUS_PER_NODE:-8}" -gt 0 ]; then
    if [ "$DEPLOY_MODE" = local ]; then gpu_nodes=(localhost); else read -ra gpu_nodes <<<"${PREFILL_NODES:-} ${DECODE_NODES:-}"; fi
    for n in "${gpu_nodes[@]}"; do preflight_gpus "$n"; done
    preflight_versions "${gpu_nodes[@]}"
  fi
  if [ -n "${RDMA_NICS:-}" ]; then
    if [ "$DEPLOY_MODE" = local ]; then preflight_nics localhost; else for n in ${PREFILL_NODES:-} ${DECODE_NODES:-}; do preflight_nics "$n"; done; fi
  fi
  [ "$DEPLOY_MODE" = local ] || preflight_clocks
  if [ "$PROBLEMS" -gt 0 ]; then
    echo "preflight: $PROBLEMS problem(s) found"
    exit 1
  fi
  echo "preflight: all checks passed ($DEPLOY_MODE mode, $CONFIG)"
}

# ---- start ---------------------------------------------------------------------------------
alive() {  # name node pid: is the process (or container) running?
  if [ "$DEPLOY_MODE" = local ]; then kill -0 "$3" 2>/dev/null
  elif [ -n "$IMAGE" ]; then [ "$(on_node "$2" "docker inspect -f '{{.State.Running}}' pds-$RUN_NAME-$1" 2>/dev/null)" = true ]
  else on_node "$2" "kill -0 $3" 2>/dev/null
  fi
}

healthy() { curl -sf -m 5 -o /dev/null "$1/health"; }

launch() {  # role: starts every process of the role, appends to procs.tsv
  local role=$1 idx node url env args name pid remote
  while IFS=$'\t' read -r idx node url env args; do
    name=$role-$idx
    [ "$env" = - ] && env=""
    printf '#!/usr/bin/env bash\n# %s on %s (%s)\nexec env %s %s %s\n' "$name" "$node" "$url" "$env" \
      "$([ "$DEPLOY_MODE" = local ] && printf %q "$PDSERVE" || echo "$PDSERVE_BIN")" "$args" >"$RUN_DIR/launch/$name.sh"
    if [ "$DEPLOY_MODE" = local ]; then
      # setsid: its own process group, which stop signals as a whole.
      setsid bash "$RUN_DIR/launch/$name.sh" >"$RUN_DIR/logs/$name.log" 2>&1 </dev/null &
      pid=$!
    elif [ -n "$IMAGE" ]; then
      local e envflags=""
      for e in $env; do envflags+=" -e $e"; done
      remote="docker run -d --name pds-$RUN_NAME-$name --gpus all --network host --ipc host --ulimit memlock=-1"
      [ -z "${RDMA_NICS:-}" ] || remote+=" --device /dev/infiniband --cap-add IPC_LOCK"
      remote+=" -v $MODEL_PATH:$MODEL_PATH:ro ${DOCKER_ARGS[*]}$envflags $IMAGE $args"
      on_node "$node" "$remote" >/dev/null
      pid=0
    else
      local d=/tmp/pdserve-runs/$RUN_NAME
      remote="mkdir -p $d && setsid env $env $PDSERVE_BIN $args >$d/$name.log 2>&1 </dev/null & echo \$!"
      pid=$(on_node "$node" "$remote")
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$role" "$node" "$url" "$pid" >>"$RUN_DIR/procs.tsv"
    log "started $name on $node${url:+ ($url)}"
  done < <("$PDSERVE" print-launch --config "$CONFIG" --role "$role")
}

wait_ready() {  # role...: until every listed role's URL answers /health; fail fast on a death
  local deadline=$((SECONDS + READY_TIMEOUT_S)) name role node url pid pending
  while :; do
    pending=0
    while IFS=$'\t' read -r name role node url pid; do
      [[ " $* " == *" $role "* ]] || continue
      alive "$name" "$node" "$pid" || { echo "deploy_pd: $name on $node died while starting; its log:" >&2; show_log "$name" "$node" 20 >&2; return 1; }
      [ "$url" = - ] || healthy "$url" || pending=$((pending + 1))
    done <"$RUN_DIR/procs.tsv"
    [ "$pending" -eq 0 ] && return 0
    [ "$SECONDS" -lt "$deadline" ] || { echo "deploy_pd: not healthy after READY_TIMEOUT_S=$READY_TIMEOUT_S s" >&2; return 1; }
    sleep 0.5
  done
}

cmd_start() {
  "$PDSERVE" print-launch --config "$CONFIG" --role router >/dev/null || exit 2  # names the bad key
  local cur
  cur=$(run_dir_of)
  if [ -n "$cur" ] && [ -f "$cur/procs.tsv" ] && [ ! -e "$cur/stopped" ]; then
    die "start: run $(basename "$cur") is still up; scripts/deploy_pd.sh stop first"
  fi
  RUN_ID=${RUN_ID:-pd-$(date +%Y%m%d-%H%M%S)}
  RUN_NAME=$RUN_ID
  RUN_DIR=$RUN_ROOT/$RUN_ID
  [ ! -e "$RUN_DIR/procs.tsv" ] || die "start: $RUN_DIR already holds a run; pick another RUN_ID"
  mkdir -p "$RUN_DIR/launch" "$RUN_DIR/logs"
  cp "$CONFIG" "$RUN_DIR/config.env"
  {
    echo "run_id=$RUN_ID"
    echo "started=$(date -Is)"
    echo "host=$(hostname)"
    echo "mode=$DEPLOY_MODE image=${IMAGE:--}"
    echo "config=$CONFIG"
    echo "pdserve=$("$PDSERVE" --version)"
    echo "git=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo -)"
  } >"$RUN_DIR/manifest.txt"
  : >"$RUN_DIR/procs.tsv"
  ln -sfn "$RUN_ID" "$RUN_ROOT/current"
  # Prefill and decode first; the router once both answer, so its first health checks pass.
  launch prefill
  launch decode
  wait_ready prefill decode || { stop_run; exit 1; }
  launch router
  wait_ready router || { stop_run; exit 1; }
  local router_url
  router_url=$(awk -F'\t' '$2 == "router" {print $4}' "$RUN_DIR/procs.tsv")
  log "ready: send OpenAI requests to $router_url/v1 (run $RUN_ID, files in $RUN_DIR)"
}

# ---- status, logs, stop --------------------------------------------------------------------
load_run() {
  RUN_DIR=$(run_dir_of)
  [ -n "$RUN_DIR" ] && [ -f "$RUN_DIR/procs.tsv" ] || return 1
  RUN_NAME=$(basename "$RUN_DIR")
}

show_log() {  # name node lines
  if [ "$DEPLOY_MODE" = local ]; then tail -n "$3" "$RUN_DIR/logs/$1.log"
  elif [ -n "$IMAGE" ]; then on_node "$2" "docker logs --tail $3 pds-$RUN_NAME-$1" 2>&1
  else on_node "$2" "tail -n $3 /tmp/pdserve-runs/$RUN_NAME/$1.log"
  fi
}

cmd_status() {
  load_run || { log "no run (nothing started under $RUN_ROOT)"; exit 1; }
  local name role node url pid state health bad=0 router_url="" info
  [ ! -e "$RUN_DIR/stopped" ] || log "run $RUN_NAME was stopped"
  printf '%-12s %-16s %-30s %-8s %s\n' NAME NODE URL PROCESS HEALTH
  while IFS=$'\t' read -r name role node url pid; do
    if alive "$name" "$node" "$pid"; then state=running; else state=down; bad=1; fi
    health=-
    if [ "$url" != - ]; then
      if healthy "$url"; then health=ok; else health=failing; bad=1; fi
    fi
    [ "$role" != router ] || router_url=$url
    printf '%-12s %-16s %-30s %-8s %s\n' "$name" "$node" "$url" "$state" "$health"
  done <"$RUN_DIR/procs.tsv"
  if [ -n "$router_url" ]; then
    echo "router's view ($router_url/get_server_info):"
    # Fetched first: a router that is down gets one line, not a JSON traceback.
    info=$(curl -sf -m 5 "$router_url/get_server_info") || info=""
    [ -n "$info" ] && python3 -c '
import json, sys
for w in json.load(sys.stdin).get("workers", []):
    print("  {:8} {:32} {:10} outstanding={} requests={} errors={} {}".format(w.get("role", "?"), w.get("url", "?"),
          w.get("state", "?"), w.get("outstanding", 0), w.get("requests", 0), w.get("errors", 0), w.get("last_health_error", "")))
' <<<"$info" || echo "  (router not answering)"
  fi
  return "$bad"
}

cmd_logs() {
  load_run || die "logs: no run under $RUN_ROOT"
  local want=${1:-} name role node url pid
  while IFS=$'\t' read -r name role node url pid; do
    [ -z "$want" ] || [ "$want" = "$name" ] || [ "$want" = "$role" ] || continue
    echo "==== $name on $node ===="
    show_log "$name" "$node" "${LINES_SHOWN:-50}" || true
  done <"$RUN_DIR/procs.tsv"
}

signal_proc() {  # signal name node pid
  if [ "$DEPLOY_MODE" = local ]; then kill "-$1" -- "-$4" 2>/dev/null || true
  elif [ -n "$IMAGE" ]; then
    if [ "$1" = TERM ]; then on_node "$3" "docker stop -t $STOP_GRACE_S pds-$RUN_NAME-$2 >/dev/null 2>&1; docker rm -f pds-$RUN_NAME-$2 >/dev/null 2>&1" || true
    else on_node "$3" "docker rm -f pds-$RUN_NAME-$2 >/dev/null 2>&1" || true; fi
  else on_node "$3" "kill -$1 -- -$4 2>/dev/null" || true
  fi
}

stop_run() {  # router, then decode, then prefill; SIGKILL what is left after STOP_GRACE_S
  local role name r node url pid deadline left
  for role in router decode prefill; do
    while IFS=$'\t' read -r name r node url pid; do
      [ "$r" = "$role" ] || continue
      if alive "$name" "$node" "$pid"; then signal_proc TERM "$name" "$node" "$pid"; log "stopping $name on $node"; fi
    done <"$RUN_DIR/procs.tsv"
  done
  deadline=$((SECONDS + STOP_GRACE_S))
  while :; do
    left=0
    while IFS=$'\t' read -r name r node url pid; do
      alive "$name" "$node" "$pid" && left=$((left + 1))
    done <"$RUN_DIR/procs.tsv"
    [ "$left" -gt 0 ] || break
    if [ "$SECONDS" -ge "$deadline" ]; then
      while IFS=$'\t' read -r name r node url pid; do
        alive "$name" "$node" "$pid" && { log "$name did not stop in $STOP_GRACE_S s: SIGKILL"; signal_proc KILL "$name" "$node" "$pid"; }
      done <"$RUN_DIR/procs.tsv"
      break
    fi
    sleep 0.2
  done
  touch "$RUN_DIR/stopped"
  log "stopped run $RUN_NAME"
}

cmd_stop() {
  load_run || { log "nothing to stop (no run under $RUN_ROOT)"; return 0; }
  stop_run
}

case $CMD in
  build-image) cmd_build_image ;;
  preflight) cmd_preflight ;;
  start) cmd_start ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  logs) cmd_logs "$@" ;;
  *) usage ;;
esac
