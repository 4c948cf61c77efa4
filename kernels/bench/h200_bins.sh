# shellcheck shell=bash
# Sourced, from the checkout root, by the device scripts that carry stripped binaries instead of
# building there: unpacks DIR/bins.tar.xz (bin/ = the binaries, bin/lib/ = libcudart.so.13,
# libspdlog, libfmt, libpcre2-8) into /tmp/v, sets the environment (h200_env.sh), B (the binaries'
# folder) and t (prints the seconds since this point, for the log), and prints the date and GPU.
#   source kernels/bench/h200_bins.sh DIR
mkdir -p /tmp/v && tar -C /tmp/v -xJf "${1:?h200_bins.sh: DIR}/bins.tar.xz"
# shellcheck source=/dev/null
source kernels/bench/h200_env.sh /tmp/v/bin/lib /work/main
# shellcheck disable=SC2034  # read by the sourcing script
B=/tmp/v/bin
h200_t0=$(date +%s)
t() { echo "t=$(( $(date +%s) - h200_t0 ))s"; }
date -u; nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
# compute-sanitizer memcheck of moe_prefill_test's five small GPU cases (every main loop), at most
# $1 seconds, the log in $OUT/memcheck.log; prints the exit status and the summary lines.
moe_prefill_memcheck() {
  local small='MoePrefill.OddRowCountsBesideEmptyExperts:MoePrefill.SkewedAndUniformRouting:MoePrefill.ScalesAboveTwoTakeTheTwoMultiplyPath:MoePrefill.TileQueueAndStaticScheduleGiveTheSameBitsCallAfterCall:MoePrefill.NoLocalRowsLeavesTheOutputZeroAndGraphReplayRepeats'
  timeout "$1" compute-sanitizer --tool memcheck --error-exitcode 9 "$B"/moe_prefill_test --gtest_filter="$small" > "$OUT"/memcheck.log 2>&1
  echo "memcheck rc=$? $(t)"
  grep -E "ERROR SUMMARY|FAILED|PASSED|OK \]" "$OUT"/memcheck.log | head -12
}
