// MLA latent attention over the paged cache on the device, correct-first (the split-KV
// FlashMLA-class kernel is issue 12). Contract = ops/mla.h (absorbed form), batched:
// for query row b (a token of some sequence), head h:
//   score_j = (q_lat[b,h] . latent_j + q_rot[b,h] . key_j) * scale, j < ctx_len[b]
//   o_lat[b,h] = sum_j softmax(score)_j * latent_j
// cache: one layer's pages [pages][page_size][latent_dim + rope_dim]; page_table:
// [rows][max_pages] int32 (row b's block table); ctx_len: [rows] int32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

struct MlaDecodeArgs {
  const float* q_lat = nullptr;   // [rows][heads][latent_dim]
  const float* q_rot = nullptr;   // [rows][heads][rope_dim]
  const float* cache = nullptr;   // one layer
  const int32_t* page_table = nullptr;
  const int32_t* ctx_len = nullptr;
  int64_t rows = 0, heads = 0, latent_dim = 0, rope_dim = 0, page_size = 0, max_pages = 0;
  float scale = 1.0f;
  float* o_lat = nullptr;         // [rows][heads][latent_dim]
};

Status mla_attend_latent(const MlaDecodeArgs& a, cudaStream_t stream);

}  // namespace pdserve::cuda
