#include <gtest/gtest.h>

#include <cmath>

#include "pdserve/ops/attn_res.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/moe_routing.h"

namespace pdserve::ops {
namespace {

TEST(RmsNorm, MatchesDefinition) {
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 0.5f, 2, 1}, y(4);
  rms_norm(x.data(), 1, 4, w.data(), 1e-5f, y.data());
  const float inv = 1.0f / std::sqrt(7.5f + 1e-5f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] * inv * w[i], 1e-6);
}

TEST(Situ, MatchesFormulaAndSaturates) {
  float g = 2.0f, u = 3.0f, out;
  situ_mul(&g, &u, 1, 4.0f, 25.0f, &out);
  const double a = 4 * std::tanh(2.0 / 4) / (1 + std::exp(-2.0));
  EXPECT_NEAR(out, a * 25 * std::tanh(3.0 / 25), 1e-5);
  float big = 1000.0f;
  situ_mul(&big, &big, 1, 4.0f, 25.0f, &out);
  EXPECT_NEAR(out, 4.0f * 25.0f, 1e-3);  // both tanh saturate
}

TEST(Routing, BiasPicksExpertsButWeightsComeFromSigmoid) {
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  std::vector<float> bias = {0.0f, 0.0f, 5.0f, 0.0f};  // pushes expert 2 into the top-2
  RoutingParams p{4, 2, true, 2.5f};
  int32_t ids[2];
  float w[2];
  route_sigmoid_topk(logits.data(), bias.data(), p, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 0);
  const float s2 = 0.5f, s0 = 1.0f / (1.0f + std::exp(-2.0f));
  EXPECT_NEAR(w[0], 2.5f * s2 / (s2 + s0), 1e-6);
  EXPECT_NEAR(w[1], 2.5f * s0 / (s2 + s0), 1e-6);
}

TEST(AttnRes, SoftmaxOverNormalisedSources) {
  std::vector<float> a = {1, 0}, b = {0, 10}, score = {0, 1}, out(2);
  const float* src[2] = {a.data(), b.data()};
  attn_res_mix(src, 2, 2, score.data(), 0.0f, out.data());
  // Normalised: a -> (sqrt2, 0) scores 0; b -> (0, sqrt2) scores sqrt2.
  const double pb = 1.0 / (1.0 + std::exp(-std::sqrt(2.0)));
  EXPECT_NEAR(out[0], (1 - pb) * 1, 1e-5);
  EXPECT_NEAR(out[1], pb * 10, 1e-5);
}

}  // namespace
}  // namespace pdserve::ops
