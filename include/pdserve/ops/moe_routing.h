// noaux_tc routing, CPU reference: sigmoid scores in fp32; the correction bias only picks
// the experts; weights come from the raw sigmoid, optionally renormalised, then scaled.
#pragma once

#include <cstdint>

namespace pdserve::ops {

struct RoutingParams {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  bool renormalize = true;
  float scaling = 1.0f;
};

// logits: [num_experts] router logits for one token; bias: [num_experts] or null.
// Writes top_k expert ids (descending by biased score; ties to the lower id) and weights.
void route_sigmoid_topk(const float* logits, const float* bias, const RoutingParams& p, int32_t* ids, float* weights);

}  // namespace pdserve::ops
