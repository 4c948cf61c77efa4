#include "pdserve/ops/elementwise.h"

#include <cmath>

namespace pdserve::ops {

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0;  // double accumulation: the norm is a reference, keep it tight
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * (weight ? weight[i] : 1.0f);
  }
}

void gated_rms_norm(const float* x, const float* gate, int64_t rows, int64_t dim, const float* weight, float eps, float* y) {
  rms_norm(x, rows, dim, weight, eps, y);
  for (int64_t i = 0; i < rows * dim; ++i) y[i] *= sigmoidf(gate[i]);
}

float silu(float x) { return x * sigmoidf(x); }

float softplus(float x) {
  // torch's default threshold: linear above 20.
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

void situ_mul(const float* gate, const float* up, int64_t n, float beta, float linear_beta, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float a = beta * std::tanh(g / beta) * sigmoidf(g);
    const float u = linear_beta > 0 ? linear_beta * std::tanh(up[i] / linear_beta) : up[i];
    out[i] = a * u;
  }
}

}  // namespace pdserve::ops
