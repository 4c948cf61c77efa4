// Deterministic random inputs for op tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace pdserve::testing {

inline std::vector<float> randn(size_t n, uint32_t seed, float std = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// max |a - b| / max(max |b|, tiny): the normalised error our differential tests bound.
// A NaN anywhere in a gives NaN, which fails every bound (fmax would silently drop it).
inline double normalized_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return NAN;
    num = std::fmax(num, d);
    den = std::fmax(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

}  // namespace pdserve::testing
