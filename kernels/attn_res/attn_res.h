// Kimi-K3 attention-residual mix on the device. Contract = ops/attn_res.h, per token:
//   out = sum_s softmax_s(rms_normalise(src_s) . score_vec) * src_s
// over sources s = bank[0..count-1] then `partial`. bank: [count][tokens][dim] (count may
// be 0), partial and out: [tokens][dim], score_vec: [dim]. One block per token.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

inline constexpr int kMaxAttnResSources = 16;  // K3: 8 block snapshots + the partial sum

Status attn_res_mix(const float* bank, int count, const float* partial, int64_t tokens, int64_t dim, const float* score_vec,
                    float eps, float* out, cudaStream_t stream);

}  // namespace pdserve::cuda
