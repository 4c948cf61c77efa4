// MLA attention over the paged latent cache, CPU reference (absorbed form).
//
// Each cached token holds [latent (kv_lora_rank, after kv_a_layernorm) | shared key part
// (rope dims, unrotated: Kimi uses NoPE)]. With q projected into latent space per head
// (q_lat = W_kb^T q_nope), the score of head h against token j is
//   (q_lat[h] . latent_j + q_rot[h] . key_j) * scale
// and the head's output in latent space is sum_j p_j latent_j; the caller applies W_vb.
#pragma once

#include <cstdint>

namespace pdserve::ops {

// One layer's pages as seen by one request: row(pos) is the cache entry of token pos.
// An fp32 cache sets layer_base; a bf16 cache (kv_cache_dtype bfloat16) sets layer_base_bf16
// instead and leaves layer_base null (row_bf16; mla_attend_latent widens exactly).
struct PagedLatentView {
  const float* layer_base = nullptr;  // [num_pages][page_size][entry_dim]
  int64_t page_size = 0;
  int64_t entry_dim = 0;
  const int32_t* page_table = nullptr;  // the request's pages in order
  const uint16_t* layer_base_bf16 = nullptr;  // same shape, bf16 bits

  bool bf16() const { return layer_base_bf16 != nullptr; }
  int64_t offset(int64_t pos) const {
    return (static_cast<int64_t>(page_table[pos / page_size]) * page_size + pos % page_size) * entry_dim;
  }
  const float* row(int64_t pos) const { return layer_base + offset(pos); }
  const uint16_t* row_bf16(int64_t pos) const { return layer_base_bf16 + offset(pos); }
};

// A bf16 view's entries of tokens [0, ctx_len), widened exactly into out [ctx_len][entry_dim].
void widen_latents(const PagedLatentView& cache, int64_t ctx_len, float* out);

// q_lat [heads][latent_dim], q_rot [heads][rope_dim]; attends to tokens [0, ctx_len).
// o_lat [heads][latent_dim].
void mla_attend_latent(const float* q_lat, const float* q_rot, int64_t heads, int64_t latent_dim, int64_t rope_dim,
                       const PagedLatentView& cache, int64_t ctx_len, float scale, float* o_lat);

}  // namespace pdserve::ops
