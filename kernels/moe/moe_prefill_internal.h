// Host-side entry of the prefill grouped GEMM's warpgroup-MMA variant (moe_prefill_wgmma_sm90.cu),
// called by moe_expert_mlp_prefill after it has checked the arguments. Internal to kernels/moe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moe/moe_decode.h"
#include "moe/moe_prefill.h"
#include "pdserve/core/status.h"

namespace pdserve::cuda::moe_prefill_detail {

// Gate/up + activation, then down, with wgmma (`kernel`: one of the kWgmma* loops); x_sorted
// in wgmma_k_position order, act written (and read) in it too. `queue`: the tile queue's two
// words, or null (static stride).
Status expert_mlp_prefill_wgmma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, MoePrefillKernel kernel,
                                cudaStream_t stream);

// The same for kWgmmaTma / kWgmmaTma4 (moe_prefill_wgmma_tma_sm90.cu).
Status expert_mlp_prefill_wgmma_tma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                    const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, MoePrefillKernel kernel,
                                    cudaStream_t stream);

}  // namespace pdserve::cuda::moe_prefill_detail
