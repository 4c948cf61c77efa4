#include "pdserve/ops/moe_routing.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "pdserve/ops/elementwise.h"

namespace pdserve::ops {

void route_sigmoid_topk(const float* logits, const float* bias, const RoutingParams& p, int32_t* ids, float* weights) {
  std::vector<float> score(p.num_experts), choice(p.num_experts);
  for (int64_t e = 0; e < p.num_experts; ++e) {
    score[e] = sigmoidf(logits[e]);
    choice[e] = score[e] + (bias ? bias[e] : 0.0f);
  }
  std::vector<int32_t> order(p.num_experts);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + p.top_k, order.end(), [&](int32_t a, int32_t b) {
    return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
  });
  float sum = 0;
  for (int64_t k = 0; k < p.top_k; ++k) {
    ids[k] = order[k];
    weights[k] = score[order[k]];
    sum += weights[k];
  }
  if (p.renormalize && p.top_k > 1)
    for (int64_t k = 0; k < p.top_k; ++k) weights[k] /= (sum + 1e-20f);
  for (int64_t k = 0; k < p.top_k; ++k) weights[k] *= p.scaling;
}

}  // namespace pdserve::ops
