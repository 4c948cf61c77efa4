// Shared between the forward's files; not part of the public model API.
#pragma once

#include <cstdint>
#include <vector>

#include "pdserve/model/model.h"
#include "pdserve/model/parallel.h"

namespace pdserve::detail {

// Sums a rank's partial block output over the tensor-parallel group (no-op on one rank).
inline void reduce_partial(Communicator* comm, float* data, int64_t n) {
  if (comm && comm->size() > 1) comm->all_reduce_sum(data, n);
}

// Where each sequence's rows sit in the packed [T, hidden] activations of one step.
struct StepLayout {
  std::vector<int64_t> row_begin;  // per sequence
  int64_t total_rows = 0;
};

// x: [T, hidden] normed inputs -> out: [T, hidden] attention block outputs, this rank's
// heads only (a partial sum of o_proj; the caller reduces).
void mla_layer(const ModelConfig& c, const MlaWeights& w, const ForwardBatch& batch, const StepLayout& lay,
               int64_t pool_layer, MlaKvPool& kv, const float* x, float* out);
void kda_layer(const ModelConfig& c, const KdaWeights& w, const ForwardBatch& batch, const StepLayout& lay,
               int64_t pool_layer, KdaStatePool& state, const ForwardOptions& opts, const float* x, float* out);
// x: [T, hidden] normed inputs -> out: [T, hidden]; dense MLP or MoE.
// The MLP returns this rank's partial sum (the caller reduces); the MoE reduces inside, since
// the latent norm must see the sum over every rank's experts.
void mlp_forward(const ModelConfig& c, const MlpWeights& w, const float* x, int64_t rows, float* out);
void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t rows, Communicator* comm, float* out);

}  // namespace pdserve::detail
