// Small element-wise and row kernels the device forward needs between the op kernels.
// All fp32, row-major; contracts match the loops in src/model/{model,attention_layers,
// ffn_layers}.cpp that they replace.
//   gather_rows:     dst[i] = src[idx[i]] (rows of `width` floats)
//   add_inplace:     x[i] += y[i]
//   sigmoid_inplace: x[i] = sigmoid(x[i])
//   mul_sigmoid:     x[i] *= sigmoid(g[i])                (MLA output gate)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status gather_rows(const float* src, int64_t width, const int32_t* idx, int64_t n, float* dst, cudaStream_t stream);
Status add_inplace(float* x, const float* y, int64_t n, cudaStream_t stream);
Status sigmoid_inplace(float* x, int64_t n, cudaStream_t stream);
Status mul_sigmoid(float* x, const float* g, int64_t n, cudaStream_t stream);

}  // namespace pdserve::cuda
