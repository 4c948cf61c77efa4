#!/usr/bin/env bash
# Runs shellcheck over every shell script of the repository (exit 77, skipped, without shellcheck).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v shellcheck >/dev/null || { echo "shellcheck not installed"; exit 77; }
mapfile -t files < <(git ls-files '*.sh' 2>/dev/null || find scripts tests tools -name '*.sh')
shellcheck "${files[@]}"
echo "shellcheck: ${#files[@]} scripts clean"
