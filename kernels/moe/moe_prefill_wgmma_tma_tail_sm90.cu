// moe_expert_mlp_prefill's bulk-copy warpgroup-MMA form whose last token tile of an expert absorbs
// a tail of up to 32 rows (kWgmmaTma160: tiles up to N = 160), in its own unit so that it and the
// 128-token forms (moe_prefill_wgmma_tma_sm90.cu) compile in parallel. Templates and design:
// moe_prefill_wgmma_tma.cuh.
#include "moe/moe_prefill_wgmma_tma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

Status expert_mlp_prefill_wgmma_tma160(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                       const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words, cudaStream_t stream) {
  return run_both<kTwoBlocks160>(w, offsets, experts, capacity, x_sorted, act, out_sorted, static_cast<TileQueue*>(queue_words), stream);
}

}  // namespace pdserve::cuda::moe_prefill_detail
