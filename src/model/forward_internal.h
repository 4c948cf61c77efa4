// Shared between the forward's files; not part of the public model API.
#pragma once

#include <cstdint>
#include <vector>

#include "pdserve/model/model.h"

namespace pdserve::detail {

// Where each sequence's rows sit in the packed [T, hidden] activations of one step.
struct StepLayout {
  std::vector<int64_t> row_begin;  // per sequence
  int64_t total_rows = 0;
};

// x: [T, hidden] normed inputs -> out: [T, hidden] attention block outputs.
void mla_layer(const ModelConfig& c, const MlaWeights& w, const ForwardBatch& batch, const StepLayout& lay,
               int64_t pool_layer, MlaKvPool& kv, const float* x, float* out);
void kda_layer(const ModelConfig& c, const KdaWeights& w, const ForwardBatch& batch, const StepLayout& lay,
               int64_t pool_layer, KdaStatePool& state, const ForwardOptions& opts, const float* x, float* out);
// x: [T, hidden] normed inputs -> out: [T, hidden]; dense MLP or MoE.
void mlp_forward(const ModelConfig& c, const MlpWeights& w, const float* x, int64_t rows, float* out);
void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t rows, float* out);

}  // namespace pdserve::detail
