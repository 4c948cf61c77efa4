#!/usr/bin/env bash
# The folders the scripts write runs into are ignored by git and hold nothing tracked:
# scripts/deploy_pd.sh's runs/ (RUN_ROOT) and scripts/run_pd_validation.sh's results/
# (RESULTS_ROOT). Exit 77 (skipped) outside a git checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "not a git checkout"; exit 77; }
status=0
for dir in runs results; do
  git check-ignore -q --no-index "$dir/RUN_ID/manifest.txt" || { echo "gitignore: $dir/ (run output) is not ignored"; status=1; }
  tracked=$(git ls-files -- "$dir")
  [ -z "$tracked" ] || { echo "gitignore: $dir/ holds tracked files: $tracked"; status=1; }
done
[ "$status" = 0 ] && echo "gitignore: runs/ and results/ ignored, nothing tracked there"
exit "$status"
