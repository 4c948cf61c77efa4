// KDA on the device, correct-first versions (the fast chunked kernels are issue 13).
// Contracts = ops/kda.h (same layouts, same maths), for one sequence per call:
//   causal_conv1d_silu: x [T][D] raw, weight [D][K], state [D][K-1] (in/out), out [T][D]
//   kda_gate:           f [T][H*D] -> g (log decay), lower-bound or softplus form
//   l2_normalize:       x <- x * rsqrt(sum x^2 + eps) * scale per row of dim
//   kda_recurrent:      token recurrence over state [H][D][D] laid out [V][K] (in/out)
// The *_step forms are one decode step of B sequences at once (one token each, row b): row
// b's state is at state_base + slots[b] * slot_stride (slots on the device, so a captured
// graph replays with any slots); slots[b] < 0 marks a padding row, whose output is zero.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status causal_conv1d_silu(const float* x, int64_t T, int64_t D, const float* weight, int64_t K, float* state, float* out,
                          cudaStream_t stream);
Status kda_gate(const float* f, int64_t T, int64_t H, int64_t D, const float* a_log, const float* dt_bias, bool has_lower_bound,
                float lower_bound, float* g, cudaStream_t stream);
Status l2_normalize(float* x, int64_t rows, int64_t dim, float eps, float scale, cudaStream_t stream);
Status kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T, int64_t H,
                     int64_t D, float* state, float* o, cudaStream_t stream);
Status causal_conv1d_silu_step(const float* x, int64_t B, int64_t D, const float* weight, int64_t K, float* state_base,
                               const int32_t* slots, int64_t slot_stride, float* out, cudaStream_t stream);
Status kda_recurrent_step(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t B, int64_t H,
                          int64_t D, float* state_base, const int32_t* slots, int64_t slot_stride, float* o, cudaStream_t stream);

}  // namespace pdserve::cuda
