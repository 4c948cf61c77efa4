// Test-only device helper of moe_decode_test (moe_decode_test_kernels.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda::moe_decode_test {

// The E4M3 decode forms' token conversion (moe_decode_qgmma.cuh, e4m3_hi_lo2) on pairs of values:
// for pair i (in[2i], in[2i + 1]), hi[i] and lo[i] get its two 16-bit halves (in[2i]'s byte low).
Status e4m3_hi_lo_pairs(const float* in, int64_t pairs, uint32_t* hi, uint32_t* lo, cudaStream_t stream);

}  // namespace pdserve::cuda::moe_decode_test
