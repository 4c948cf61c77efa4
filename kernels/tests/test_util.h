// Helpers shared by the kernel differential tests: random inputs, the normalised error,
// device round trips, and a fixture that skips (saying so) without an sm_90 GPU.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../../tests/ops/test_rng.h"
#include "common/cuda_check.h"
#include "common/device_info.h"

namespace pdserve::cuda::ktest {

// The same random inputs and normalised error as the CPU op tests.
using pdserve::testing::randn;
inline double nerr(const std::vector<float>& a, const std::vector<float>& b) {
  return pdserve::testing::normalized_error(a, b);
}

template <typename T>
DeviceBuffer<T> dev(const std::vector<T>& v) {
  DeviceBuffer<T> b;
  EXPECT_TRUE(b.upload(v).is_ok());
  return b;
}

template <typename T>
std::vector<T> host(const DeviceBuffer<T>& b) {
  EXPECT_TRUE(cuda_status(cudaDeviceSynchronize(), "sync").is_ok());
  return b.download().value();
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_hopper()) GTEST_SKIP() << "no sm_90 GPU here: the CUDA kernels are compiled but not run";
  }
};

// The greedy token of a logits row (the lowest id on ties).
inline int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t v = 1; v < n; ++v)
    if (row[v] > row[best]) best = static_cast<int32_t>(v);
  return best;
}

}  // namespace pdserve::cuda::ktest
