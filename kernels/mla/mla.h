// MLA latent attention over the paged cache on the device, correct-first: one block per
// (row, head). The fast split-KV kernel with the same contract is mla_decode.h (the backend's
// default); this one stays as its correctness anchor and the fallback for shapes it does not
// take. Contract = ops/mla.h (absorbed form), batched:
// for query row b (a token of some sequence), head h:
//   score_j = (q_lat[b,h] . latent_j + q_rot[b,h] . key_j) * scale, j < ctx_len[b]
//   o_lat[b,h] = sum_j softmax(score)_j * latent_j
// cache: one layer's pages [pages][page_size][latent_dim + rope_dim]; page_table:
// [rows][max_pages] int32 (row b's block table); ctx_len: [rows] int32.
// cache_bf16 (non-null): the pages hold bf16 entries (same layout, 2 bytes an element; `cache` is
// unused), each read as its exact fp32 value (bf16 bits << 16); q, the softmax and the outputs stay fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

struct MlaDecodeArgs {
  const float* q_lat = nullptr;   // [rows][heads][latent_dim]
  const float* q_rot = nullptr;   // [rows][heads][rope_dim]
  const float* cache = nullptr;   // one layer
  const uint16_t* cache_bf16 = nullptr;  // one layer, bf16 (non-null: used instead of `cache`)
  const int32_t* page_table = nullptr;
  const int32_t* ctx_len = nullptr;
  int64_t rows = 0, heads = 0, latent_dim = 0, rope_dim = 0, page_size = 0, max_pages = 0;
  float scale = 1.0f;
  float* o_lat = nullptr;         // [rows][heads][latent_dim]
};

Status mla_attend_latent(const MlaDecodeArgs& a, cudaStream_t stream);

// The rest of the absorbed MLA layer around mla_attend_latent (mla_glue_sm90.cu), as in
// detail::mla_layer (src/model/attention_layers.cpp). kv_b: [heads * (nope + v_dim)][latent_dim].
//   mla_absorb_q:  q [rows][heads][nope + rope] -> q_lat[b,h] = sum_d q[b,h,d] * kv_b[h*(nope+v)+d]
//                  (d ascending) and q_rot[b,h] = q[b,h,nope:]
//   mla_v_up:      out[b,h,d] = kv_b[h*(nope+v)+nope+d] . o_lat[b,h]   ([rows][heads][v_dim])
//   mla_write_latents: cache entry dst_entry[b] (= page * page_size + offset in one layer's
//                  pages) = [latent[b] | key[b]]. A prefill chunk writes all of its entries
//                  before attention; each query row then reads its own prefix (ctx_len).
//                  dst_entry[b] < 0: row b writes nothing (padding).
//   mla_write_latents_bf16: the same into a bf16 cache (pages of uint16_t bf16 bit patterns,
//                  [latent | key] per entry): every value rounded to nearest even with the
//                  bits of core/dtype.h f32_to_bf16 (finite values and +-Inf as
//                  __float2bfloat16_rn, overflow to +-Inf; a NaN keeps its sign and top payload
//                  bits with the quiet bit set, where cvt.rn would give the canonical NaN), so
//                  the device and the host pools hold the same bits for the same values.
Status mla_absorb_q(const float* q, const float* kv_b, int64_t rows, int64_t heads, int64_t nope, int64_t rope, int64_t v_dim,
                    int64_t latent_dim, float* q_lat, float* q_rot, cudaStream_t stream);
Status mla_v_up(const float* o_lat, const float* kv_b, int64_t rows, int64_t heads, int64_t nope, int64_t v_dim, int64_t latent_dim,
                float* out, cudaStream_t stream);
Status mla_write_latents(const float* latent, const float* key, int64_t rows, int64_t latent_dim, int64_t rope_dim,
                         const int32_t* dst_entry, float* cache, cudaStream_t stream);
Status mla_write_latents_bf16(const float* latent, const float* key, int64_t rows, int64_t latent_dim, int64_t rope_dim,
                              const int32_t* dst_entry, uint16_t* cache, cudaStream_t stream);

}  // namespace pdserve::cuda
