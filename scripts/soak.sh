#!/usr/bin/env bash
# Soak test (issue 15): prefill + decode + router on loopback with the tiny K3 model and a
# cluster secret, mixed load through the router for DURATION seconds: normal and streamed
# requests, clients that disconnect mid-stream, aborts (clients that give up early), bad
# inputs, and one decode restart (SIGTERM drain, then start again) half-way. At the end it
# checks that no daemon crashed, every page and slot is free on both sides, and resident
# memory stopped growing. Bounded in time and in requests; CI does not run it.
#
#   DURATION=600 CONCURRENCY=6 MAX_REQUESTS=200000 bash scripts/soak.sh
#
# Exit 0 when every check passes; the figures are printed and kept in $WORK/report.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${PDSERVE:-build/src/pdserve}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/pdserve-soak-XXXXXX")}
export PDSERVE WORK DURATION=${DURATION:-600} CONCURRENCY=${CONCURRENCY:-6} MAX_REQUESTS=${MAX_REQUESTS:-200000}
[[ -x "$PDSERVE" ]] || { echo "soak: $PDSERVE not built (bash scripts/build.sh)" >&2; exit 2; }
mkdir -p "$WORK"
[[ -d "$WORK/model" ]] || "$PDSERVE" make-model --preset tiny-k3 --out "$WORK/model" >/dev/null
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/cluster.secret"
echo "soak: work dir $WORK, ${DURATION} s, concurrency ${CONCURRENCY}"
exec python3 "$(dirname "$0")/soak_driver.py"
