// Sampling on the device. Greedy first: ids[r] = argmax of logits row r (ties to the lower
// id, as the CPU runtime does). logits: [rows, vocab] fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, cudaStream_t stream);

}  // namespace pdserve::cuda
