#include "pdserve/runtime/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace pdserve::runtime {
namespace {

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0;
  return p;
}

std::vector<int32_t> draw_n(const SamplingParams& p, const std::vector<float>& logits, int n, uint64_t fallback = 1) {
  Sampler s(p, {}, fallback);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits).token);
  return out;
}

TEST(Sampling, ArgmaxTakesLowestIdOnTies) {
  EXPECT_EQ(Sampler::argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(Sampler::argmax(std::vector<float>{-1, -2}), 0);
}

TEST(Sampling, GreedyIgnoresSeed) {
  std::vector<float> l = {0.1f, 2.0f, 1.9f, -3.0f};
  SamplingParams p = greedy();
  p.seed = 7;
  for (int32_t t : draw_n(p, l, 20, 99)) EXPECT_EQ(t, 1);
}

TEST(Sampling, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  std::vector<float> flat(64, 0.0f);
  SamplingParams p;
  p.seed = 42;
  auto a = draw_n(p, flat, 50), b = draw_n(p, flat, 50, 12345);  // the fallback is unused with a seed
  EXPECT_EQ(a, b);
  p.seed = 43;
  EXPECT_NE(a, draw_n(p, flat, 50));
  // Without a seed, the engine's fallback decides.
  p.seed.reset();
  EXPECT_EQ(draw_n(p, flat, 50, 5), draw_n(p, flat, 50, 5));
  EXPECT_NE(draw_n(p, flat, 50, 5), draw_n(p, flat, 50, 6));
}

// The decode role observes the token prefill sampled, then samples the rest: with the same
// seed that must be the unified run's continuation, penalties included.
TEST(Sampling, ObservingTheFirstTokenContinuesTheSeededStream) {
  std::vector<float> flat(64, 0.0f);
  SamplingParams p;
  p.seed = 42;
  p.frequency_penalty = 0.5;  // the observed token must count for the penalties too
  const std::vector<int32_t> unified = draw_n(p, flat, 40);
  Sampler decode(p, {}, 999);
  decode.observe(unified[0]);
  std::vector<int32_t> rest;
  for (int i = 1; i < 40; ++i) rest.push_back(decode.sample(flat).token);
  EXPECT_EQ(rest, std::vector<int32_t>(unified.begin() + 1, unified.end()));
  // Without spending the observed token's draw the stream would be one behind.
  Sampler behind(p, {}, 999);
  std::vector<int32_t> shifted;
  for (int i = 1; i < 40; ++i) shifted.push_back(behind.sample(flat).token);
  EXPECT_NE(shifted, rest);
  // Greedy requests draw nothing, so observing must not disturb them either.
  SamplingParams g = greedy();
  g.presence_penalty = 1.0;
  std::vector<float> l = {2.0f, 1.5f, 0.0f};
  Sampler gd(g, {}, 1);
  gd.observe(0);
  EXPECT_EQ(gd.sample(l).token, 1);
}

TEST(Sampling, TemperatureOneFollowsTheDistribution) {
  // p(1) = 3/4 when logits are [0, ln 3].
  std::vector<float> l = {0.0f, std::log(3.0f)};
  SamplingParams p;
  p.seed = 1;
  auto t = draw_n(p, l, 4000);
  double ones = 0;
  for (int32_t x : t) ones += x;
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
}

TEST(Sampling, TopKKeepsOnlyTheBestK) {
  std::vector<float> l = {1.0f, 0.9f, 0.8f, 0.7f, 0.6f};
  SamplingParams p;
  p.seed = 3;
  p.top_k = 2;
  std::set<int32_t> seen;
  for (int32_t t : draw_n(p, l, 300)) seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
  p.top_k = 1;  // top_k = 1 is greedy even at temperature 1
  for (int32_t t : draw_n(p, l, 50)) EXPECT_EQ(t, 0);
}

TEST(Sampling, TopPCutsTheTail) {
  // probs ~ [0.64, 0.24, 0.09, 0.03]: top_p 0.7 keeps the first two.
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.seed = 11;
  p.top_p = 0.7;
  std::set<int32_t> seen;
  for (int32_t t : draw_n(p, l, 500)) seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
  p.top_p = 0.1;
  for (int32_t t : draw_n(p, l, 50)) EXPECT_EQ(t, 0);
}

TEST(Sampling, MinPDropsUnlikelyTokens) {
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};  // p/pmax = 1, .37, .14, .05
  SamplingParams p;
  p.seed = 5;
  p.min_p = 0.2;
  std::set<int32_t> seen;
  for (int32_t t : draw_n(p, l, 500)) seen.insert(t);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(Sampling, PresenceAndFrequencyPenaltiesChangeTheGreedyPick) {
  std::vector<float> l = {2.0f, 1.5f, 0.0f};
  SamplingParams p = greedy();
  p.presence_penalty = 1.0;  // after one pick of 0 its logit is 1.0 < 1.5
  EXPECT_EQ(draw_n(p, l, 2), (std::vector<int32_t>{0, 1}));
  p.presence_penalty = 0.0;
  p.frequency_penalty = 0.3;  // 0: 2.0, 1.7, 1.4 ; 1: 1.5 -> 0, 0, 1 ...
  EXPECT_EQ(draw_n(p, l, 3), (std::vector<int32_t>{0, 0, 1}));
}

TEST(Sampling, RepetitionPenaltyCoversThePrompt) {
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0;  // token 0 is in the prompt: 2.0 / 2 = 1.0 < 1.5
  std::vector<int32_t> prompt = {0};
  Sampler s(p, prompt, 1);
  EXPECT_EQ(s.sample(l).token, 1);
  // Negative logits are multiplied (pushed further down), not divided.
  Sampler s2(p, std::vector<int32_t>{2}, 1);
  std::vector<float> l2 = {-1.5f, -3.0f, -1.0f};
  EXPECT_EQ(s2.sample(l2).token, 0);  // token 2: -1.0 * 2 = -2.0
}

TEST(Sampling, LogprobsAreTheRawLogSoftmax) {
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  TokenLogprob lp = Sampler::logprobs(l, 2, 3);
  double z = 0;
  for (float x : l) z += std::exp(x);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].id, 1);  // tie with 3: lowest id first
  EXPECT_EQ(lp.top[1].id, 3);
  EXPECT_EQ(lp.top[2].id, 2);
  EXPECT_NEAR(lp.top[2].logprob, lp.logprob, 1e-6);
  // Through sample(): the chosen token and its logprob come back together.
  SamplingParams p = greedy();
  p.logprobs = true;
  p.top_logprobs = 2;
  Sampler s(p, {}, 1);
  SampleResult r = s.sample(l);
  EXPECT_EQ(r.token, 1);
  EXPECT_EQ(r.logprob.id, 1);
  EXPECT_EQ(r.logprob.top.size(), 2u);
}

TEST(Sampling, ValidateNamesTheField) {
  auto msg = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    return p.validate().message();
  };
  EXPECT_EQ(msg([](SamplingParams&) {}), "");
  EXPECT_EQ(msg([](SamplingParams& p) { p.temperature = -0.5; }).rfind("temperature:", 0), 0u);
  EXPECT_EQ(msg([](SamplingParams& p) { p.top_p = 0.0; }).rfind("top_p:", 0), 0u);
  EXPECT_EQ(msg([](SamplingParams& p) { p.top_p = 1.01; }).rfind("top_p:", 0), 0u);
  EXPECT_EQ(msg([](SamplingParams& p) { p.max_tokens = 0; }).rfind("max_tokens:", 0), 0u);
  EXPECT_EQ(msg([](SamplingParams& p) { p.top_logprobs = 21; }).rfind("top_logprobs:", 0), 0u);
  EXPECT_EQ(msg([](SamplingParams& p) { p.stop = {""}; }).rfind("stop:", 0), 0u);
  EXPECT_EQ(msg([](SamplingParams& p) { p.presence_penalty = 3; }).rfind("presence_penalty:", 0), 0u);
}

}  // namespace
}  // namespace pdserve::runtime
