// Token embedding lookup on the device: out[t] = table[ids[t]] converted from bf16 to fp32.
// table: [vocab, dim] bf16 (uint16 bits), ids: [n] int32, out: [n, dim] fp32. An id outside
// [0, vocab) yields a zero row (the model layer validates ids before the forward).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status embedding_bf16(const uint16_t* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n, float* out,
                      cudaStream_t stream);

}  // namespace pdserve::cuda
