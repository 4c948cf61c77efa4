// Routed-expert MoE on the device: the routed part of detail::moe_forward
// (src/model/ffn_layers.cpp) on one expert-parallel rank, in three launchers.
//
//   1. moe_permute: the (token, k) pairs, p = t*k + j, grouped by local expert. Local expert
//      e (global id expert_begin + e) owns rows [offsets[e], offsets[e+1]) of the sorted
//      order, its pairs in ascending p (the CPU's by_expert order). x_sorted[row] =
//      x[p / k]. Pairs routed to experts of other ranks get no row (pair_row[p] = -1).
//   2. moe_expert_mlp: per local expert, over its rows: gate = x W1^T, up = x W3^T (MXFP4,
//      dequantised in registers), act = silu_mul or situ_mul (ops/elementwise.h), then
//      out = act W2^T. fp32 accumulation; only the summation order differs from the CPU.
//   3. moe_combine: y[t] = sum over j = 0..k-1, in that order from 0, of
//      weights[t*k+j] * out_sorted[pair_row[t*k+j]] (a pair with no local row adds w*0), one
//      rounded multiply and one rounded add per term, as the CPU does: bit-identical to it
//      for the same expert outputs.
// The row count (offsets[local_experts]) stays on the device: launchers take `capacity`
// (tokens*k, an upper bound) and never synchronise, so the sequence can be graph-captured.
//
// Shapes and layouts (all device pointers, row-major, fp32 unless noted):
//   ids      [tokens, k] int32 global expert ids (routing.h's output)
//   weights  [tokens, k] routing weights
//   x        [tokens, dim], dim = the expert input width (routed_expert_hidden_size)
//   x_sorted [capacity, dim]; act [capacity, inter]; out_sorted [capacity, dim]
//   y        [tokens, dim]
//   MXFP4 weights stacked over the local experts, each matrix as in ops/mxfp4.h:
//     w1 (gate), w3 (up): packed [experts, inter, dim/2] u8, scales [experts, inter, dim/32] u8
//     w2 (down):          packed [experts, dim, inter/2] u8, scales [experts, dim, inter/32] u8
// dim and inter must be multiples of 32; local_experts <= 1024; k <= 64.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

// Device scratch the caller owns, sized for `local_experts` and `capacity` = tokens * k.
struct MoePlan {
  int32_t* offsets = nullptr;       // [local_experts + 1]
  int32_t* sorted_pairs = nullptr;  // [capacity]: pair index of each sorted row
  int32_t* pair_row = nullptr;      // [capacity]: sorted row of each pair, or -1
};

// One stacked MXFP4 projection: `rows` outputs over `cols` inputs per expert.
struct Mxfp4Experts {
  const uint8_t* packed = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

enum class MoeActivation { kSiLU, kSiTU };

struct MoeExpertWeights {
  Mxfp4Experts w1, w3;  // gate, up: rows = inter, cols = dim
  Mxfp4Experts w2;      // down: rows = dim, cols = inter
  MoeActivation activation = MoeActivation::kSiLU;
  float situ_beta = 1.0f;
  float situ_linear_beta = 0.0f;  // 0: up passes through
};

Status moe_permute(const int32_t* ids, int64_t tokens, int64_t k, int64_t expert_begin, int64_t local_experts, const float* x,
                   int64_t dim, const MoePlan& plan, float* x_sorted, cudaStream_t stream);

Status moe_expert_mlp(const MoeExpertWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                      const float* x_sorted, float* act, float* out_sorted, cudaStream_t stream);

// Step 2 for experts stored dense in fp32 (bf16 checkpoints such as Kimi-Linear), same
// contract otherwise: w1, w3 [experts, inter, dim], w2 [experts, dim, inter], stacked over
// the local experts. One warp per (expert, output row); no alignment requirements.
struct MoeDenseWeights {
  const float* w1 = nullptr;
  const float* w3 = nullptr;
  const float* w2 = nullptr;
  int64_t dim = 0, inter = 0;
  MoeActivation activation = MoeActivation::kSiLU;
  float situ_beta = 1.0f;
  float situ_linear_beta = 0.0f;
};

Status moe_expert_mlp_dense(const MoeDenseWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                            const float* x_sorted, float* act, float* out_sorted, cudaStream_t stream);

Status moe_combine(const float* out_sorted, const int32_t* pair_row, const float* weights, int64_t tokens, int64_t k, int64_t dim,
                   float* y, cudaStream_t stream);

}  // namespace pdserve::cuda
