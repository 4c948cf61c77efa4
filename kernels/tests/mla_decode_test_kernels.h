// Test-only device helper of mla_decode_test (mla_decode_test_kernels.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda::mla_decode_test {

// One CTA: triggers the next kernel's launch first (griddepcontrol.launch_dependents), sleeps
// spin_ns, then writes cache[dst_entry[i] * entry + k] = src[i * entry + k] (i < n, k < entry)
// and q[j] = q_src[j] (j < q_n). Launched without pdl itself.
Status late_writer(float* cache, const int32_t* dst_entry, const float* src, int64_t n, int64_t entry, float* q, const float* q_src,
                   int64_t q_n, unsigned spin_ns, cudaStream_t stream);
// The same into a bf16 cache (entries of bf16 bits).
Status late_writer(uint16_t* cache, const int32_t* dst_entry, const uint16_t* src, int64_t n, int64_t entry, float* q, const float* q_src,
                   int64_t q_n, unsigned spin_ns, cudaStream_t stream);

}  // namespace pdserve::cuda::mla_decode_test
