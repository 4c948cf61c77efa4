// Shared helpers of the kernel benchmarks (kernels_bench, moe_decode_bench, ...): timing, inputs, rows.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"

namespace pdserve::cuda::bench {

inline double g_bw = 4.2e12;      // read-only HBM bandwidth measured here (performance.md)
inline double g_flops = 790e12;   // dense bf16 peak (performance.md); the fp32 kernels' floor uses it too
inline int g_reps = 20;

inline void check(const Status& s, const char* what) {
  if (s.is_ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

inline void check(cudaError_t e, const char* what) { check(cuda_status(e, what), what); }

// Fast deterministic bytes (xorshift64*), so GB-sized inputs take well under a second.
inline void fill_bytes(std::vector<uint8_t>& v, uint64_t seed, uint8_t lo = 0, uint8_t span = 0) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < v.size(); i += 8) {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    uint64_t r = s * 0x2545F4914F6CDD1Dull;
    for (size_t j = i; j < std::min(v.size(), i + 8); ++j, r >>= 8)
      v[j] = span ? static_cast<uint8_t>(lo + (r & 0xff) % span) : static_cast<uint8_t>(r);
  }
}

inline std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& v) {
  DeviceBuffer<T> b;
  check(b.upload(v), "upload");
  return b;
}

// Median time in microseconds of f(i), i = the repeat index (for rotating inputs).
inline double median_us(const std::function<void(int)>& f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f(i);
  std::vector<double> t;
  for (int i = 0; i < g_reps; ++i) {
    cudaEventRecord(a);
    f(i);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1e3);
  }
  check(cuda_status(cudaGetLastError(), "bench"), "kernel");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

inline double median_us(const std::function<void()>& f) {
  return median_us([&](int) { f(); });
}

// One table row; a stage with no floor of its own (bytes 0) prints dashes there.
inline void row(const std::string& what, double us, double bytes, double floor_us, const std::string& note = "") {
  if (bytes <= 0 || floor_us <= 0) {
    std::printf("| %-44s | %9.1f | - | - | - | %s\n", what.c_str(), us, note.c_str());
    return;
  }
  std::printf("| %-44s | %9.1f | %8.1f | %5.2fx | %5.2f TB/s | %s\n", what.c_str(), us, floor_us, us / floor_us, bytes / us * 1e-6,
              note.c_str());
}

void bench_layers();  // bench_layers.cpp

}  // namespace pdserve::cuda::bench
