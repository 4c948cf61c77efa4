// Row-wise norms and MLP activations, CPU reference (fp32).
#pragma once

#include <cstdint>

namespace pdserve::ops {

// y = x * rsqrt(mean(x^2) + eps) * weight; weight may be null (weightless norm).
void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y);
// KDA output norm: y = rms_norm(x) * weight * sigmoid(gate), per row of `dim`.
void gated_rms_norm(const float* x, const float* gate, int64_t rows, int64_t dim, const float* weight, float eps, float* y);

inline float sigmoidf(float x);
float silu(float x);
float softplus(float x);

// out[i] = act(gate[i]) * up[i] over n elements.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
// SiTU: beta*tanh(g/beta)*sigmoid(g) * (linear_beta > 0 ? linear_beta*tanh(u/linear_beta) : u).
void situ_mul(const float* gate, const float* up, int64_t n, float beta, float linear_beta, float* out);

}  // namespace pdserve::ops

#include <cmath>
inline float pdserve::ops::sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
