#!/usr/bin/env bash
# The README's run command: sets up a fresh machine, builds pdserve (CPU backend), writes the
# tiny Kimi-K3 model, and runs it. Everything lands under ${WORK_DIR:-/tmp/pdserve-quickstart}.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK_DIR=${WORK_DIR:-/tmp/pdserve-quickstart}
mkdir -p "$WORK_DIR"

bash scripts/setup.sh
bash scripts/build.sh
PDSERVE="$ROOT/${BUILD_DIR:-build}/src/pdserve"

MODEL="$WORK_DIR/tiny-k3"
"$PDSERVE" make-model --preset tiny-k3 --out "$MODEL"

echo "== tokenizer: 'Hello, Kimi' =="
echo -n "Hello, Kimi" | "$PDSERVE" tokenize --model "$MODEL"

echo "== greedy generation on the model layer =="
"$PDSERVE" generate --model "$MODEL" --prompt "Hello, Kimi" --max-tokens 16
