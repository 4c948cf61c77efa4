// noaux_tc MoE routing on the device. Contract = ops/moe_routing.h, per token:
// sigmoid scores; the correction bias only chooses the top-k (descending biased score,
// ties to the lower expert id); weights are the raw scores, renormalised (+1e-20) when
// asked, times the scaling factor.
// logits: [tokens, experts] fp32; bias: [experts] or null; ids: [tokens, k] int32;
// weights: [tokens, k] fp32. One warp per token; experts <= 1024, k <= 32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status route_sigmoid_topk(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t k, bool renormalize,
                          float scaling, int32_t* ids, float* weights, cudaStream_t stream);

}  // namespace pdserve::cuda
