// Gated MLP activations on the device. Contract = ops/elementwise.h:
//   silu_mul: out = silu(gate) * up
//   situ_mul: out = beta*tanh(g/beta)*sigmoid(g) * (linear_beta > 0 ? linear_beta*tanh(u/linear_beta) : u)
// gate, up, out: n fp32 values; out may alias either input.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
Status situ_mul(const float* gate, const float* up, int64_t n, float beta, float linear_beta, float* out, cudaStream_t stream);

}  // namespace pdserve::cuda
