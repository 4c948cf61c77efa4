// RMSNorm family on the device. Contract = ops/elementwise.h (the CPU reference):
//   rms_norm:       y = x * rsqrt(mean(x^2) + eps) * weight   (weight may be null: weightless)
//   gated_rms_norm: y = rms_norm(x) * weight * sigmoid(gate)   (KDA output norm)
// x, gate, y: [rows, dim] fp32, row-major; weight: [dim]. y may alias x. One block per row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y, cudaStream_t stream);
Status gated_rms_norm(const float* x, const float* gate, int64_t rows, int64_t dim, const float* weight, float eps, float* y,
                      cudaStream_t stream);

}  // namespace pdserve::cuda
