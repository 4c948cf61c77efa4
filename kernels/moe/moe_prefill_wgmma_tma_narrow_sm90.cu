// moe_expert_mlp_prefill's narrow-tile form (kWgmmaTmaNarrow): kWgmmaTma160W's ring and main loop on
// token tiles of at most 64, two CTAs an SM, in its own unit. Templates and design:
// moe_prefill_wgmma_tma.cuh; when it pays: docs/perf.md "Two CTAs an SM on narrow tiles".
#include "moe/moe_prefill_wgmma_tma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

Status expert_mlp_prefill_wgmma_tma_narrow(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                           const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words,
                                           cudaStream_t stream) {
  // The tile starts share the dynamic shared memory as in kWgmmaTma160W; past its expert limit both run kWgmmaTma160.
  if (experts > kMoePrefillWordsMaxExperts)
    return expert_mlp_prefill_wgmma_tma160(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, stream);
  return run_both<kNarrow>(w, offsets, experts, capacity, x_sorted, act, out_sorted, static_cast<TileQueue*>(queue_words), stream);
}

}  // namespace pdserve::cuda::moe_prefill_detail
