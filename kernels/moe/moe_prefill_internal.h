// Host-side entry of the prefill grouped GEMM's warpgroup-MMA variant (moe_prefill_wgmma_sm90.cu),
// called by moe_expert_mlp_prefill after it has checked the arguments. Internal to kernels/moe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "moe/moe_activation.cuh"
#include "moe/moe_decode.h"
#include "moe/moe_prefill.h"
#include "pdserve/core/status.h"

namespace pdserve::cuda::moe_prefill_detail {

// The two launches of one prefill MLP, whatever the main loop: gate/up fused with the
// activation (x -> act), then down (act -> out), each instantiated for the scale layout its
// weights carry. `launch` is a generic lambda called as launch(kGated, kWide, a, b, x, act,
// out, fn) with the two flags as std::bool_constant tags (CUDA builds as C++17 here).
template <class Launch>
Status run_gate_up_then_down(const MoeDecodeWeights& w, const uint16_t* x_sorted, uint16_t* act, float* out_sorted,
                             const Launch& launch) {
  const MoeAct fn{w.activation, w.situ_beta, w.situ_linear_beta};
  constexpr std::true_type gated{}, wide{};
  constexpr std::false_type down{}, narrow{};
  const Status up = w.w1.wide_scales || w.w3.wide_scales ? launch(gated, wide, w.w1, w.w3, x_sorted, act, nullptr, fn)
                                                         : launch(gated, narrow, w.w1, w.w3, x_sorted, act, nullptr, fn);
  PDS_RETURN_IF_ERROR(up);
  return w.w2.wide_scales ? launch(down, wide, w.w2, w.w2, act, nullptr, out_sorted, fn)
                          : launch(down, narrow, w.w2, w.w2, act, nullptr, out_sorted, fn);
}

// An upper bound on one launch's (token tile, output tile) pairs, for sizing its grid: the
// experts' rows (capacity in all) take at most capacity / tok_tile + one partial tile an expert.
inline int64_t max_output_tiles(int64_t capacity, int64_t tok_tile, int64_t experts, int64_t rows, int64_t per_tile) {
  return (capacity / tok_tile + experts) * ((rows + per_tile - 1) / per_tile);
}

// Gate/up + activation, then down, with wgmma (`kernel`: one of the kWgmma* loops); x_sorted
// in wgmma_k_position order, act written (and read) in it too. `queue`: the tile queue's two
// words, or null (static stride).
Status expert_mlp_prefill_wgmma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, MoePrefillKernel kernel,
                                cudaStream_t stream);

// The same for the bulk-copy forms kWgmmaTma, kWgmmaTma4, kWgmmaTmaMc and kWgmmaTma160
// (moe_prefill_wgmma_tma_sm90.cu; kWgmmaTma160 forwarded to the next one).
Status expert_mlp_prefill_wgmma_tma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                    const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, MoePrefillKernel kernel,
                                    cudaStream_t stream);

// kWgmmaTma160 (moe_prefill_wgmma_tma_tail_sm90.cu).
Status expert_mlp_prefill_wgmma_tma160(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                       const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, cudaStream_t stream);

// kWgmmaTma160W (moe_prefill_wgmma_tma_words_sm90.cu); more than kMoePrefillWordsMaxExperts
// experts run kWgmmaTma160.
Status expert_mlp_prefill_wgmma_tma160w(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                        const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, cudaStream_t stream);

// kWgmmaTmaNarrow (moe_prefill_wgmma_tma_narrow_sm90.cu); the same expert limit and fallback.
Status expert_mlp_prefill_wgmma_tma_narrow(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                           const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, cudaStream_t stream);

// The same for kWgmmaProducer (moe_prefill_producer_sm90.cu).
Status expert_mlp_prefill_wgmma_producer(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                         const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, cudaStream_t stream);

// The same for kWgmmaCarry / kWgmmaCarry6 (moe_prefill_carry_sm90.cu).
Status expert_mlp_prefill_wgmma_carry(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                      const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, MoePrefillKernel kernel,
                                      cudaStream_t stream);

// The same for kWgmmaPingpong (moe_prefill_pingpong_sm90.cu).
Status expert_mlp_prefill_wgmma_pingpong(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                         const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue, cudaStream_t stream);

}  // namespace pdserve::cuda::moe_prefill_detail
