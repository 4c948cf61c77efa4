#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each one.
#   FUZZ_SECONDS=20 bash scripts/fuzz.sh            # every target for 20 s (CI)
#   FUZZ_RUNS=1000000 bash scripts/fuzz.sh fuzz_safetensors
# Seed corpora: fuzz/corpus/<target>/ (committed); new inputs go to a scratch copy.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
fi
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_safetensors fuzz_model_config fuzz_tokenizer fuzz_chat_k3 fuzz_bootstrap fuzz_transfer_wire fuzz_rdma_control fuzz_node_control)
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DPDSERVE_CUDA=OFF -DPDSERVE_TESTS=OFF -DPDSERVE_FUZZ=ON >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}"
for t in "${TARGETS[@]}"; do
  scratch=$(mktemp -d)
  cp -r "fuzz/corpus/$t/." "$scratch/"
  limit=(-max_total_time="${FUZZ_SECONDS:-20}")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
  echo "== $t (${limit[*]})"
  "$BUILD_DIR/fuzz/$t" "${limit[@]}" -print_final_stats=1 "$scratch" 2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY|Done" || true
  # libFuzzer exits non-zero on a crash; grep above only filters the noise.
  "$BUILD_DIR/fuzz/$t" -runs=0 "$scratch" >/dev/null 2>&1 || { echo "fuzz: $t failed on its corpus"; exit 1; }
  rm -rf "$scratch"
done
