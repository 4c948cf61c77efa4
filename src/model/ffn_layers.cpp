// Feed-forward blocks: the dense MLP and the (latent) MoE with noaux_tc routing.
#include <vector>

#include "forward_internal.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/linear.h"
#include "pdserve/ops/moe_routing.h"
#include "pdserve/ops/mxfp4.h"

namespace pdserve::detail {

namespace {

void activate(const ModelConfig& c, const float* gate, const float* up, int64_t n, float* out) {
  if (c.activation == MlpActivation::kSiTU)
    ops::situ_mul(gate, up, n, static_cast<float>(c.situ_beta), static_cast<float>(c.situ_linear_beta), out);
  else
    ops::silu_mul(gate, up, n, out);
}

// One expert over `rows` gathered inputs of width `in` -> [rows, in].
void expert_forward(const ModelConfig& c, const ExpertWeights& e, const float* x, int64_t rows, int64_t in, float* out) {
  const int64_t im = c.moe_intermediate_size;
  std::vector<float> gate(rows * im), up(rows * im), act(rows * im);
  if (e.quantized) {
    ops::mxfp4_matmul_nt(x, rows, e.q1, gate.data());
    ops::mxfp4_matmul_nt(x, rows, e.q3, up.data());
  } else {
    ops::matmul_nt(x, rows, e.w1, gate.data());
    ops::matmul_nt(x, rows, e.w3, up.data());
  }
  activate(c, gate.data(), up.data(), rows * im, act.data());
  if (e.quantized) ops::mxfp4_matmul_nt(act.data(), rows, e.q2, out);
  else ops::matmul_nt(act.data(), rows, e.w2, out);
  (void)in;
}

}  // namespace

void mlp_forward(const ModelConfig& c, const MlpWeights& w, const float* x, int64_t rows, float* out) {
  const int64_t inter = w.gate.rows;
  std::vector<float> gate(rows * inter), up(rows * inter), act(rows * inter);
  ops::matmul_nt(x, rows, w.gate, gate.data());
  ops::matmul_nt(x, rows, w.up, up.data());
  activate(c, gate.data(), up.data(), rows * inter, act.data());
  ops::matmul_nt(act.data(), rows, w.down, out);
}

void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t rows, Communicator* comm, float* out) {
  const int64_t hd = c.hidden_size, lat = c.routed_expert_hidden_size, E = c.num_experts, K = c.num_experts_per_token;
  // Route on the full hidden state.
  std::vector<float> logits(rows * E);
  ops::matmul_nt(x, rows, w.router, logits.data());
  std::vector<int32_t> ids(rows * K);
  std::vector<float> wts(rows * K);
  ops::RoutingParams rp{E, K, c.moe_renormalize, static_cast<float>(c.routed_scaling_factor)};
  for (int64_t t = 0; t < rows; ++t)
    ops::route_sigmoid_topk(&logits[t * E], w.router_bias.data(), rp, &ids[t * K], &wts[t * K]);

  std::vector<float> xl;
  const float* xin = x;
  if (c.latent_moe) {
    xl.resize(rows * lat);
    ops::matmul_nt(x, rows, w.latent_down, xl.data());
    xin = xl.data();
  }
  // Group the (token, k) pairs by expert; each token's sum runs in k order so its result
  // does not depend on the other tokens of the batch.
  std::vector<std::vector<int64_t>> by_expert(E);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t k = 0; k < K; ++k) by_expert[ids[t * K + k]].push_back(t * K + k);
  std::vector<float> expert_out(rows * K * lat, 0.0f);  // zero for experts of other ranks
  const int64_t e0 = w.expert_begin, e1 = w.expert_begin + static_cast<int64_t>(w.experts.size());
  for (int64_t e = e0; e < e1; ++e) {
    const auto& pairs = by_expert[e];
    if (pairs.empty()) continue;
    const int64_t n = static_cast<int64_t>(pairs.size());
    std::vector<float> in(n * lat), res(n * lat);
    for (int64_t i = 0; i < n; ++i) std::copy(xin + (pairs[i] / K) * lat, xin + (pairs[i] / K + 1) * lat, &in[i * lat]);
    expert_forward(c, w.experts[e - e0], in.data(), n, lat, res.data());
    for (int64_t i = 0; i < n; ++i) std::copy(&res[i * lat], &res[(i + 1) * lat], &expert_out[pairs[i] * lat]);
  }
  std::vector<float> y(rows * lat, 0.0f);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t d = 0; d < lat; ++d) y[t * lat + d] += wts[t * K + k] * expert_out[(t * K + k) * lat + d];
  reduce_partial(comm, y.data(), rows * lat);
  if (c.latent_moe) {
    if (c.latent_moe_norm) ops::rms_norm(y.data(), rows, lat, w.latent_norm.data(), static_cast<float>(c.rms_norm_eps), y.data());
    ops::matmul_nt(y.data(), rows, w.latent_up, out);
  } else {
    std::copy(y.begin(), y.end(), out);
  }
  if (w.has_shared) {
    std::vector<float> sh(rows * hd);
    mlp_forward(c, w.shared, x, rows, sh.data());
    reduce_partial(comm, sh.data(), rows * hd);
    for (int64_t i = 0; i < rows * hd; ++i) out[i] += sh[i];
  }
}

}  // namespace pdserve::detail
