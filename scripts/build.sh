#!/usr/bin/env bash
# Configures and builds pdserve into ${BUILD_DIR:-build}. CPU-only unless PDSERVE_CUDA says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
read -ra EXTRA <<<"${CMAKE_EXTRA_ARGS:-}"  # several -D flags, split on spaces
# ccache, where installed, makes rebuilds in several worktrees cheap; CI has none and is unaffected.
if command -v ccache >/dev/null && [ "${PDSERVE_CCACHE:-1}" = 1 ]; then
  EXTRA+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DPDSERVE_CUDA="${PDSERVE_CUDA:-AUTO}" "${EXTRA[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
