#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build).
# About 25 minutes of building on 2 cores. CI builds the same flags with CUDA into build/ instead
# (.ci/run); this CPU-only tree is the quicker form on a dev machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build-asan}
bash scripts/setup.sh
PDSERVE_CUDA=OFF CMAKE_EXTRA_ARGS="-DPDSERVE_SANITIZE=ON ${CMAKE_EXTRA_ARGS:-}" bash scripts/build.sh
cd "$BUILD_DIR"
# halt_on_error: any report fails the test that produced it.
ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
