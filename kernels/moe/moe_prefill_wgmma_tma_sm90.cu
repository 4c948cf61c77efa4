// moe_expert_mlp_prefill's bulk-copy warpgroup-MMA forms with 128-token tiles: kWgmmaTma,
// kWgmmaTma4 and kWgmmaTmaMc (the templates and their design: moe_prefill_wgmma_tma.cuh). The
// tail-absorbing forms are instantiated in moe_prefill_wgmma_tma_tail_sm90.cu.
#include "moe/moe_prefill_wgmma_tma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

Status expert_mlp_prefill_wgmma_tma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                    const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words, MoePrefillKernel kernel,
                                    cudaStream_t stream) {
  TileQueue* queue = static_cast<TileQueue*>(queue_words);
  switch (kernel) {
    case MoePrefillKernel::kWgmmaTma: return run_both<kTwoBlocks>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaTma4: return run_both<kOneBlock>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaTmaMc:
      return run_both<kTwoBlocks, true>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaTma160:
      return expert_mlp_prefill_wgmma_tma160(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, stream);
    case MoePrefillKernel::kWgmmaTma160W:
      return expert_mlp_prefill_wgmma_tma160w(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, stream);
    case MoePrefillKernel::kWgmmaTmaNarrow:
      return expert_mlp_prefill_wgmma_tma_narrow(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, stream);
    default: return invalid_argument("moe_expert_mlp_prefill: not a bulk-copy wgmma main loop");
  }
}

}  // namespace pdserve::cuda::moe_prefill_detail
