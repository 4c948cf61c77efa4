#!/usr/bin/env bash
# Configures and builds pdserve into ${BUILD_DIR:-build}. CPU-only unless PDSERVE_CUDA says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
read -ra EXTRA <<<"${CMAKE_EXTRA_ARGS:-}"  # several -D flags, split on spaces
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DPDSERVE_CUDA="${PDSERVE_CUDA:-AUTO}" "${EXTRA[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
