// CPU side of the MoE kernel tests (moe_test.cpp, moe_decode_test.cpp): real routing of
// random logits, random MXFP4 experts, and the routed part of detail::moe_forward
// (src/model/ffn_layers.cpp) written out with the same ops and summation order.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "moe/moe.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/moe_routing.h"
#include "pdserve/ops/mxfp4.h"
#include "test_util.h"

namespace pdserve::cuda::ktest {

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Real noaux_tc routing of random logits: distinct ids per token, renormalised weights.
inline Routing route(int64_t tokens, int64_t experts, int64_t k, uint32_t seed) {
  auto logits = randn(tokens * experts, seed), bias = randn(experts, seed + 1, 0.1f);
  Routing r{std::vector<int32_t>(tokens * k), std::vector<float>(tokens * k)};
  ops::RoutingParams p{experts, k, true, 2.5f};
  for (int64_t t = 0; t < tokens; ++t) ops::route_sigmoid_topk(&logits[t * experts], bias.data(), p, &r.ids[t * k], &r.weights[t * k]);
  return r;
}

// Stacked MXFP4 weights of `experts` experts, kept on the host and the device.
struct HostExperts {
  int64_t experts, inter, dim;
  std::vector<uint8_t> p1, s1, p3, s3, p2, s2;
  ops::Mxfp4Matrix m(const std::vector<uint8_t>& p, const std::vector<uint8_t>& s, int64_t e, int64_t rows, int64_t cols) const {
    return {rows, cols, p.data() + e * rows * cols / 2, s.data() + e * rows * cols / 32};
  }
};

// Quantised from Gaussian weights (realistic scales) when `quantize`, else random bytes
// with scale bytes scale_lo .. scale_lo + span - 1 (default 2^-7..2^-3; fast at K3 sizes;
// every E2M1 code occurs).
inline HostExperts make_experts(int64_t experts, int64_t inter, int64_t dim, uint32_t seed, bool quantize, int scale_lo = 120,
                                int scale_span = 5) {
  HostExperts h{experts, inter, dim, {}, {}, {}, {}, {}, {}};
  auto fill = [&](std::vector<uint8_t>& p, std::vector<uint8_t>& s, int64_t rows, int64_t cols, uint32_t sd) {
    if (quantize) {
      auto w = randn(experts * rows * cols, sd, 0.05f);
      ops::mxfp4_quantize(w.data(), experts * rows, cols, &p, &s);
      return;
    }
    std::mt19937 g(sd);
    p.resize(experts * rows * cols / 2);
    s.resize(experts * rows * cols / 32);
    for (auto& b : p) b = static_cast<uint8_t>(g());
    for (auto& b : s) b = static_cast<uint8_t>(scale_lo + g() % scale_span);
  };
  fill(h.p1, h.s1, inter, dim, seed);
  fill(h.p3, h.s3, inter, dim, seed + 1);
  fill(h.p2, h.s2, dim, inter, seed + 2);
  return h;
}

// expert_forward of ffn_layers.cpp for local expert e over n gathered rows.
inline void expert_reference(const HostExperts& h, int64_t e, const float* x, int64_t n, MoeActivation act, float beta, float lb, float* out) {
  std::vector<float> gate(n * h.inter), up(n * h.inter), a(n * h.inter);
  ops::mxfp4_matmul_nt(x, n, h.m(h.p1, h.s1, e, h.inter, h.dim), gate.data());
  ops::mxfp4_matmul_nt(x, n, h.m(h.p3, h.s3, e, h.inter, h.dim), up.data());
  if (act == MoeActivation::kSiTU) ops::situ_mul(gate.data(), up.data(), n * h.inter, beta, lb, a.data());
  else ops::silu_mul(gate.data(), up.data(), n * h.inter, a.data());
  ops::mxfp4_matmul_nt(a.data(), n, h.m(h.p2, h.s2, e, h.dim, h.inter), out);
}

// by_expert of ffn_layers.cpp: the pairs of each local expert, ascending.
inline std::vector<std::vector<int32_t>> by_expert(const Routing& r, int64_t expert_begin, int64_t local) {
  std::vector<std::vector<int32_t>> g(local);
  for (size_t p = 0; p < r.ids.size(); ++p)
    if (r.ids[p] >= expert_begin && r.ids[p] < expert_begin + local) g[r.ids[p] - expert_begin].push_back(static_cast<int32_t>(p));
  return g;
}

// The routed part of moe_forward on one rank: expert outputs per pair (zero for pairs of
// other ranks), then y[t] += w * out in k order.
inline std::vector<float> routed_reference(const HostExperts& h, const Routing& r, int64_t tokens, int64_t k, int64_t expert_begin,
                                    const std::vector<float>& x, MoeActivation act, float beta, float lb) {
  const int64_t dim = h.dim;
  const auto groups = by_expert(r, expert_begin, h.experts);
  std::vector<float> expert_out(tokens * k * dim, 0.0f);
  for (int64_t e = 0; e < h.experts; ++e) {
    const auto& pairs = groups[e];
    if (pairs.empty()) continue;
    const int64_t n = static_cast<int64_t>(pairs.size());
    std::vector<float> in(n * dim), res(n * dim);
    for (int64_t i = 0; i < n; ++i) std::copy(&x[(pairs[i] / k) * dim], &x[(pairs[i] / k + 1) * dim], &in[i * dim]);
    expert_reference(h, e, in.data(), n, act, beta, lb, res.data());
    for (int64_t i = 0; i < n; ++i) std::copy(&res[i * dim], &res[(i + 1) * dim], &expert_out[pairs[i] * dim]);
  }
  std::vector<float> y(tokens * dim, 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t d = 0; d < dim; ++d) y[t * dim + d] += r.weights[t * k + j] * expert_out[(t * k + j) * dim + d];
  return y;
}

}  // namespace pdserve::cuda::ktest
