// Helpers shared by the kernel differential tests: random inputs, the normalised error,
// device round trips, and a fixture that skips (saying so) without an sm_90 GPU.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_info.h"

namespace pdserve::cuda::ktest {

inline std::vector<float> randn(size_t n, uint32_t seed, float std = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// max |a - b| / max |b|; NaN anywhere in a gives NaN, which fails every bound.
inline double nerr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    if (std::isnan(d)) return NAN;
    num = std::fmax(num, d);
    den = std::fmax(den, std::fabs(double(b[i])));
  }
  return num / den;
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

}  // namespace pdserve::cuda::ktest
