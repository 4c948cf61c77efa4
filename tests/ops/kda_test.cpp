#include <gtest/gtest.h>

#include <cmath>

#include "pdserve/ops/kda.h"
#include "test_rng.h"

namespace pdserve::ops {
namespace {

struct KdaInputs {
  int64_t T, H, D;
  std::vector<float> q, k, v, g, beta;
};

KdaInputs make_inputs(int64_t T, int64_t H, int64_t D, uint32_t seed) {
  KdaInputs in{T, H, D, testing::randn(T * H * D, seed), testing::randn(T * H * D, seed + 1),
               testing::randn(T * H * D, seed + 2), {}, {}};
  l2_normalize(in.q.data(), T * H, D, 1e-6f, 1.0f / std::sqrt(static_cast<float>(D)));
  l2_normalize(in.k.data(), T * H, D, 1e-6f, 1.0f);
  auto f = testing::randn(T * H * D, seed + 3);
  auto dt = testing::randn(H * D, seed + 4, 0.5f);
  std::vector<float> a_log(H);
  for (int64_t h = 0; h < H; ++h) a_log[h] = std::log(1.0f + 3.0f * h);
  in.g.resize(T * H * D);
  kda_gate(f.data(), T, H, D, a_log.data(), dt.data(), true, -5.0f, in.g.data());
  auto b = testing::randn(T * H, seed + 5);
  for (float& x : b) x = 1.0f / (1.0f + std::exp(-x));
  in.beta = b;
  return in;
}

TEST(Kda, GateFormulas) {
  float f = 0.3f, dt = 0.2f, a_log = std::log(2.0f), g;
  kda_gate(&f, 1, 1, 1, &a_log, &dt, true, -5.0f, &g);
  EXPECT_NEAR(g, -5.0 / (1.0 + std::exp(-2.0 * 0.5)), 1e-6);
  kda_gate(&f, 1, 1, 1, &a_log, &dt, false, 0.0f, &g);
  EXPECT_NEAR(g, -2.0 * std::log1p(std::exp(0.5)), 1e-6);
}

TEST(Kda, RecurrentMatchesDeltaRuleByHand) {
  // D = 1: S = S*e^g; u = b(v - S k); S += k u; o = S q.
  float q = 0.5f, k = 1.0f, v = 2.0f, g = std::log(0.5f), beta = 0.5f, S = 4.0f, o;
  kda_recurrent(&q, &k, &v, &g, &beta, 1, 1, 1, &S, &o);
  // decayed S = 2; u = 0.5 * (2 - 2) = 0; S = 2; o = 1.
  EXPECT_NEAR(S, 2.0f, 1e-6);
  EXPECT_NEAR(o, 1.0f, 1e-6);
}

class KdaChunked : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(KdaChunked, EqualsRecurrent) {
  auto [T, chunk] = GetParam();
  const int64_t H = 2, D = 16;
  KdaInputs in = make_inputs(T, H, D, 11 + static_cast<uint32_t>(T));
  auto s0 = testing::randn(H * D * D, 99, 0.3f);
  std::vector<float> s_rec = s0, s_chk = s0, o_rec(T * H * D), o_chk(T * H * D);
  kda_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T, H, D, s_rec.data(), o_rec.data());
  kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T, H, D, chunk, s_chk.data(), o_chk.data());
  EXPECT_LT(testing::normalized_error(o_chk, o_rec), 2e-5);
  EXPECT_LT(testing::normalized_error(s_chk, s_rec), 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KdaChunked,
                         ::testing::Values(std::make_tuple(1, 64), std::make_tuple(7, 64), std::make_tuple(64, 64),
                                           std::make_tuple(65, 64), std::make_tuple(130, 64), std::make_tuple(50, 7),
                                           std::make_tuple(33, 1), std::make_tuple(40, 16)));

TEST(Kda, StateCarriedAcrossCallsEqualsOnePass) {
  const int64_t T = 90, H = 2, D = 16;
  KdaInputs in = make_inputs(T, H, D, 5);
  std::vector<float> s_one(H * D * D, 0.0f), s_two(H * D * D, 0.0f), o_one(T * H * D), o_two(T * H * D);
  kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T, H, D, 64, s_one.data(), o_one.data());
  const int64_t split = 37, off = split * H * D;
  kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), split, H, D, 64, s_two.data(), o_two.data());
  kda_chunked(in.q.data() + off, in.k.data() + off, in.v.data() + off, in.g.data() + off, in.beta.data() + split * H,
              T - split, H, D, 64, s_two.data(), o_two.data() + off);
  EXPECT_LT(testing::normalized_error(o_two, o_one), 2e-5);
  EXPECT_LT(testing::normalized_error(s_two, s_one), 2e-5);
}

TEST(Conv, StepwiseEqualsWholeSequence) {
  const int64_t T = 20, D = 6, K = 4;
  auto x = testing::randn(T * D, 1), w = testing::randn(D * K, 2);
  std::vector<float> st_a(D * (K - 1), 0.0f), st_b(D * (K - 1), 0.0f), out_a(T * D), out_b(T * D);
  causal_conv1d_silu(x.data(), T, D, w.data(), K, st_a.data(), out_a.data());
  for (int64_t t = 0; t < T; ++t) causal_conv1d_silu(&x[t * D], 1, D, w.data(), K, st_b.data(), &out_b[t * D]);
  EXPECT_EQ(out_a, out_b);
  EXPECT_EQ(st_a, st_b);
  // The state holds the last K-1 raw inputs, oldest first.
  for (int64_t c = 0; c < D; ++c)
    for (int64_t j = 0; j < K - 1; ++j) EXPECT_EQ(st_a[c * (K - 1) + j], x[(T - (K - 1) + j) * D + c]);
  // First output only sees the current input: silu(w[K-1] * x0).
  const float a = w[K - 1] * x[0];
  EXPECT_NEAR(out_a[0], a / (1 + std::exp(-a)), 1e-6);
}

}  // namespace
}  // namespace pdserve::ops
