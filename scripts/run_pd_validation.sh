#!/usr/bin/env bash
# The PD validation suite (the seed's interface), driving `pdserve bench` case by case:
#
#   RUN_ID=... bash scripts/run_pd_validation.sh [standard|decode512|decode512-c8|all]
#
#   standard (default)  64 -> 8 C1; 1K -> 16 C1 non-streaming; 16K -> 1 C1 x8; 16K -> 1 C8 x40
#   decode512           16K -> 512 C1 x1
#   decode512-c8        16K -> 512 C8 x40
#   all                 the six cases above
#
# Environment:
#   RUN_ID        results go to $RESULTS_ROOT/$RUN_ID/ (default pd-validation-<time>)
#   BASE_URL      OpenAI-compatible endpoint (default http://127.0.0.1:31000)
#   SCALE         integer >= 1 dividing lengths and request counts, for CPU runs on a tiny
#                 model (counts never drop below the case's concurrency; outputs above one
#                 token keep at least two so TPOT stays defined). Default 1.
#   LOG_DIRS      service log files or directories (':' or space separated) scanned after
#                 the run for fatal patterns; any hit fails the suite, naming file and line
#   FATAL_PATTERN extended regex, case-insensitive (default below)
#   PDSERVE_BIN   the pdserve binary (default build/src/pdserve, then pdserve on PATH)
#   RESULTS_ROOT  default <repo>/results
#   CHUNK_CHECK   at-most (default: a streamed chunk may carry several tokens) or exact
#                 (one chunk per token)
#   MODEL, WARMUP (default 0), SEED (default 0), VOCAB_SIZE, BENCH_EXTRA_ARGS (split on spaces)
#
# Exit status: 0 when every case passed its checks and the log scan found nothing; 1 when a
# case or the log scan failed; 2 on a usage or setup error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

MODE=${1:-standard}
case "$MODE" in
  standard | decode512 | decode512-c8 | all) ;;
  -h | --help) usage; exit 0 ;;
  *) echo "run_pd_validation: unknown mode '$MODE'" >&2; usage >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN_ID=${RUN_ID:-pd-validation-$(date +%Y%m%d-%H%M%S)}
BASE_URL=${BASE_URL:-http://127.0.0.1:31000}
SCALE=${SCALE:-1}
LOG_DIRS=${LOG_DIRS:-}
FATAL_PATTERN=${FATAL_PATTERN:-traceback|fatal|out of memory|nccl error|abort|segmentation fault}
RESULTS_ROOT=${RESULTS_ROOT:-$ROOT/results}
MODEL=${MODEL:-}
WARMUP=${WARMUP:-0}
SEED=${SEED:-0}
VOCAB_SIZE=${VOCAB_SIZE:-}
CHUNK_CHECK=${CHUNK_CHECK:-at-most}
read -r -a EXTRA_ARGS <<<"${BENCH_EXTRA_ARGS:-}"

die() { echo "run_pd_validation: $*" >&2; exit 2; }

[[ "$SCALE" =~ ^[1-9][0-9]*$ ]] || die "SCALE must be an integer >= 1, got '$SCALE'"
[[ "$RUN_ID" =~ ^[A-Za-z0-9._-]+$ ]] || die "RUN_ID may hold only letters, digits, '.', '_' and '-'"

PDSERVE=${PDSERVE_BIN:-}
if [[ -z "$PDSERVE" ]]; then
  if [[ -x "$ROOT/build/src/pdserve" ]]; then
    PDSERVE=$ROOT/build/src/pdserve
  else
    PDSERVE=$(command -v pdserve || true)
  fi
fi
[[ -n "$PDSERVE" && -x "$PDSERVE" ]] || die "no pdserve binary (build it, or set PDSERVE_BIN)"

RUN_DIR=$RESULTS_ROOT/$RUN_ID
[[ -e "$RUN_DIR/summary.md" ]] && die "$RUN_DIR already holds a suite; pick another RUN_ID"
mkdir -p "$RUN_DIR"

# slug input output count concurrency stream(1|0)
CASES=()
case "$MODE" in
  standard | all)
    CASES+=("smoke-64-8-c1 64 8 1 1 1"
      "smoke-1k-16-c1-nostream 1024 16 1 1 0"
      "prefill-16k-1-c1 16384 1 8 1 1"
      "prefill-16k-1-c8 16384 1 40 8 1") ;;&
  decode512 | all) CASES+=("decode-16k-512-c1 16384 512 1 1 1") ;;&
  decode512-c8 | all) CASES+=("decode-16k-512-c8 16384 512 40 8 1") ;;
esac

# 16384 -> 16K, as the seed's table writes lengths.
human() { if (($1 >= 1024 && $1 % 1024 == 0)); then echo "$(($1 / 1024))K"; else echo "$1"; fi; }

{
  echo "RUN_ID=$RUN_ID BASE_URL=$BASE_URL SCALE=$SCALE LOG_DIRS=$LOG_DIRS WARMUP=$WARMUP SEED=$SEED CHUNK_CHECK=$CHUNK_CHECK \\"
  echo "  bash scripts/run_pd_validation.sh $MODE"
} >"$RUN_DIR/command.txt"

ROWS=()
FAILURES=()
SETUP_ERROR=0
for spec in "${CASES[@]}"; do
  read -r slug in out count conc stream <<<"$spec"
  in=$((in / SCALE > 0 ? in / SCALE : 1))
  if ((out > 1)); then out=$((out / SCALE > 2 ? out / SCALE : 2)); fi
  count=$(((count + SCALE - 1) / SCALE))
  ((count < conc)) && count=$conc
  name="$(human "$in") -> $(human "$out"), C$conc"
  args=(bench --base-url "$BASE_URL" --dataset random-ids --input-len "$in" --output-len "$out"
    --num-prompts "$count" --concurrency "$conc" --warmup "$WARMUP" --seed "$SEED" --chunk-check "$CHUNK_CHECK"
    --out "$RUN_DIR/$slug" --run-id "$RUN_ID/$slug")
  if ((stream == 0)); then
    args+=(--no-stream)
    name+=", non-streaming smoke"
  fi
  args+=(--case-name "$name")
  [[ -n "$MODEL" ]] && args+=(--model "$MODEL")
  [[ -n "$VOCAB_SIZE" ]] && args+=(--vocab-size "$VOCAB_SIZE")
  ((${#EXTRA_ARGS[@]})) && args+=("${EXTRA_ARGS[@]}")

  echo "== $name: $count requests -> $RUN_DIR/$slug"
  rc=0
  "$PDSERVE" "${args[@]}" >"$RUN_DIR/$slug.stdout" 2>"$RUN_DIR/$slug.log" || rc=$?
  if ((rc == 0)); then
    ROWS+=("$(tail -n 1 "$RUN_DIR/$slug.stdout")")
    echo "   pass"
    continue
  fi
  FAILURES+=("case $name: pdserve bench exited $rc (log: $RUN_DIR/$slug.log)")
  sed 's/^/   /' "$RUN_DIR/$slug.log" | tail -n 12 >&2
  if ((rc == 1)); then
    ROWS+=("$(tail -n 1 "$RUN_DIR/$slug.stdout")")
  else
    ROWS+=("| $name | error | N/A | N/A | N/A |")
    SETUP_ERROR=1
    echo "   setup error: stopping the suite here (the remaining cases would fail the same way)" >&2
    break
  fi
done

# Fatal patterns in the services' logs fail the suite, whatever the figures say.
SCAN=$RUN_DIR/log_scan.txt
: >"$SCAN"
SCANNED=0
if [[ -n "$LOG_DIRS" ]]; then
  IFS=': ' read -r -a LOG_PATHS <<<"$LOG_DIRS"
  for path in "${LOG_PATHS[@]}"; do
    [[ -z "$path" ]] && continue
    if [[ ! -e "$path" ]]; then
      FAILURES+=("log scan: $path does not exist")
      continue
    fi
    SCANNED=$((SCANNED + 1))
    # -H: always name the file; -I: skip binary files.
    grep -rHnIiE -- "$FATAL_PATTERN" "$path" >>"$SCAN" || true
  done
  if [[ -s "$SCAN" ]]; then
    hits=$(wc -l <"$SCAN")
    FAILURES+=("log scan: $hits line(s) match /$FATAL_PATTERN/ (all in $SCAN), first: $(head -n 1 "$SCAN")")
  fi
fi

{
  echo "# PD validation: $RUN_ID ($MODE, SCALE=$SCALE)"
  echo
  echo "| Case | Requests | Input TPS | TTFT P50 / P95 | TPOT P50 / P95 |"
  echo "|---|---:|---:|---:|---:|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "- Endpoint: $BASE_URL"
  if [[ -z "$LOG_DIRS" ]]; then
    echo "- Log scan: not run (LOG_DIRS unset)"
  else
    echo "- Log scan: $SCANNED path(s) for /$FATAL_PATTERN/: $([[ -s "$SCAN" ]] && echo "FATAL LINES FOUND" || echo "clean")"
  fi
  if ((${#FAILURES[@]})); then
    echo "- Result: FAIL"
    printf '  - %s\n' "${FAILURES[@]}"
  else
    echo "- Result: PASS, every request completed with the requested token counts"
  fi
} >"$RUN_DIR/summary.md"

echo
cat "$RUN_DIR/summary.md"
if [[ -z "$LOG_DIRS" ]]; then
  echo "run_pd_validation: warning: LOG_DIRS is unset, so no service log was scanned" >&2
fi
if ((${#FAILURES[@]})); then
  echo >&2
  echo "run_pd_validation: FAILED" >&2
  printf '  %s\n' "${FAILURES[@]}" >&2
  exit 1
fi
((SETUP_ERROR == 0)) || exit 1
echo "run_pd_validation: PASS ($RUN_DIR)"
