#include "pdserve/ops/mxfp4.h"

#include <algorithm>
#include <cmath>

#include "pdserve/core/dtype.h"
#include "pdserve/ops/linear.h"

namespace pdserve::ops {

void mxfp4_dequant_row(const Mxfp4Matrix& w, int64_t r, float* out) {
  const uint8_t* p = w.packed + r * (w.cols / 2);
  const uint8_t* s = w.scales + r * (w.cols / kMxfp4GroupSize);
  for (int64_t g = 0; g < w.cols / kMxfp4GroupSize; ++g) {
    const float scale = e8m0_to_f32(s[g]);
    for (int j = 0; j < kMxfp4GroupSize / 2; ++j) {
      const uint8_t b = p[g * (kMxfp4GroupSize / 2) + j];
      out[g * kMxfp4GroupSize + 2 * j] = e2m1_to_f32(b & 0xf) * scale;
      out[g * kMxfp4GroupSize + 2 * j + 1] = e2m1_to_f32(b >> 4) * scale;
    }
  }
}

void mxfp4_dequant(const Mxfp4Matrix& w, float* out) {
  for (int64_t r = 0; r < w.rows; ++r) mxfp4_dequant_row(w, r, out + r * w.cols);
}

void mxfp4_matmul_nt(const float* x, int64_t m, const Mxfp4Matrix& w, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    mxfp4_dequant_row(w, r, row.data());
    for (int64_t i = 0; i < m; ++i) y[i * w.rows + r] = dot(x + i * w.cols, row.data(), w.cols);
  }
}

namespace {
uint8_t nearest_e2m1(float v) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float a = std::fabs(v);
  int best = 0;
  for (int i = 1; i < 8; ++i) {
    float d = std::fabs(a - kMag[i]), db = std::fabs(a - kMag[best]);
    if (d < db || (d == db && (i % 2) == 0)) best = i;
  }
  return static_cast<uint8_t>(best | (v < 0 && best ? 8 : 0));
}
}  // namespace

void mxfp4_quantize(const float* w, int64_t rows, int64_t cols, std::vector<uint8_t>* packed, std::vector<uint8_t>* scales) {
  const int64_t groups = cols / kMxfp4GroupSize;
  packed->assign(rows * cols / 2, 0);
  scales->assign(rows * groups, 127);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* src = w + r * cols + g * kMxfp4GroupSize;
      float amax = 0;
      for (int j = 0; j < kMxfp4GroupSize; ++j) amax = std::fmax(amax, std::fabs(src[j]));
      int e = 0;
      if (amax > 0) e = static_cast<int>(std::ceil(std::log2(amax / 6.0f)));
      e = std::max(-127, std::min(127, e));
      (*scales)[r * groups + g] = static_cast<uint8_t>(e + 127);
      const float inv = std::ldexp(1.0f, -e);
      for (int j = 0; j < kMxfp4GroupSize; j += 2) {
        uint8_t lo = nearest_e2m1(src[j] * inv), hi = nearest_e2m1(src[j + 1] * inv);
        (*packed)[(r * cols + g * kMxfp4GroupSize + j) / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

}  // namespace pdserve::ops
