// moe_expert_mlp_prefill's bulk-copy warpgroup-MMA form whose packed words ride the token ring
// (kWgmmaTma160W), in its own unit so that it compiles beside the other bulk-copy forms. Templates
// and design: moe_prefill_wgmma_tma.cuh.
#include "moe/moe_prefill_wgmma_tma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

Status expert_mlp_prefill_wgmma_tma160w(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                        const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words, cudaStream_t stream) {
  // More experts than the tile starts' room beside the 4 x 56 KB ring: the same tiles and MMAs with
  // the words through registers (bit-identical outputs).
  if (experts > kMoePrefillWordsMaxExperts)
    return expert_mlp_prefill_wgmma_tma160(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, stream);
  return run_both<kTwoBlocks160W>(w, offsets, experts, capacity, x_sorted, act, out_sorted, static_cast<TileQueue*>(queue_words), stream);
}

}  // namespace pdserve::cuda::moe_prefill_detail
