// KDA state slicing between prefill and decode TP sizes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "../model/test_models.h"
#include "pdserve/disagg/state_slicing.h"
#include "pdserve/model/tp_group.h"

namespace pdserve::disagg {
namespace {

// A value that names where a float sits in the *global* state: layer, block (0..2 conv
// q/k/v, 3 recurrent), global head and index within the head.
float tag(int64_t layer, int block, int64_t head, int64_t i) {
  return static_cast<float>(((layer * 4 + block) * 1000 + head) * 100000 + i);
}

// Fills every rank's slot of a given TP layout with the tags of the global positions.
std::vector<std::vector<float>> tagged_slots(const KdaStateShape& s, int tp) {
  const int64_t hl = s.heads / tp, conv_head = s.head_dim * s.conv_tail, rec_head = s.head_dim * s.head_dim;
  std::vector<std::vector<float>> slots(tp, std::vector<float>(slot_floats(s, tp)));
  for (int r = 0; r < tp; ++r) {
    int64_t o = 0;
    for (int64_t l = 0; l < s.layers; ++l) {
      for (int b = 0; b < 3; ++b)
        for (int64_t h = 0; h < hl; ++h)
          for (int64_t i = 0; i < conv_head; ++i) slots[r][o++] = tag(l, b, r * hl + h, i);
      for (int64_t h = 0; h < hl; ++h)
        for (int64_t i = 0; i < rec_head; ++i) slots[r][o++] = tag(l, 3, r * hl + h, i);
    }
  }
  return slots;
}

class Slicing : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(Slicing, EveryDestinationFloatComesFromItsGlobalPosition) {
  auto [src_tp, dst_tp] = GetParam();
  const KdaStateShape s{3, 12, 4, 3};
  auto plan = plan_state_copy(s, src_tp, dst_tp);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  auto src = tagged_slots(s, src_tp), want = tagged_slots(s, dst_tp);
  std::vector<std::vector<float>> got(dst_tp, std::vector<float>(slot_floats(s, dst_tp), -1.0f));
  std::vector<std::vector<int>> writes(dst_tp, std::vector<int>(slot_floats(s, dst_tp), 0));
  for (const StateRun& r : *plan) {
    ASSERT_LE(r.src_offset + r.length, static_cast<int64_t>(src[r.src_rank].size()));
    ASSERT_LE(r.dst_offset + r.length, static_cast<int64_t>(got[r.dst_rank].size()));
    for (int64_t i = 0; i < r.length; ++i) {
      got[r.dst_rank][r.dst_offset + i] = src[r.src_rank][r.src_offset + i];
      ++writes[r.dst_rank][r.dst_offset + i];
    }
  }
  EXPECT_EQ(got, want);
  for (const auto& w : writes)
    for (int n : w) ASSERT_EQ(n, 1);
}

INSTANTIATE_TEST_SUITE_P(TpPairs, Slicing,
                         ::testing::Values(std::make_pair(1, 1), std::make_pair(4, 4), std::make_pair(2, 4), std::make_pair(4, 2),
                                           std::make_pair(1, 12), std::make_pair(12, 1), std::make_pair(3, 4), std::make_pair(4, 6)));

TEST(Slicing, SeedShapeMovesFewLargeRuns) {
  // Kimi-K3: 69 KDA layers, 96 heads of 128, K-1 = 3; prefill TP4 -> decode TP32.
  const KdaStateShape k3{69, 96, 128, 3};
  auto plan = plan_state_copy(k3, 4, 32);
  ASSERT_TRUE(plan.is_ok());
  // Per decode rank and layer: its 3 heads are consecutive on one prefill rank, so one run
  // per conv block and one for the recurrent state.
  EXPECT_EQ(plan->size(), 32u * 69u * 4u);
  int64_t total = 0;
  for (const StateRun& r : *plan) total += r.length;
  EXPECT_EQ(total, 32 * slot_floats(k3, 32));
  // kimi-k3.md: per layer, conv state 221,184 B in bf16 and recurrent 6,291,456 B in fp32.
  EXPECT_EQ(slot_floats(k3, 1), 69 * (221184 / 2 + 6291456 / 4));
}

TEST(Slicing, RefusesHeadCountsThatDoNotDivide) {
  auto plan = plan_state_copy({1, 6, 4, 3}, 4, 2);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_NE(plan.status().message().find("prefill TP 4"), std::string::npos);
}

TEST(Slicing, LatentSources) {
  EXPECT_EQ(latent_source_ranks(4, 32)[31], 3);
  EXPECT_EQ(latent_source_ranks(4, 32)[8], 1);
  EXPECT_EQ(latent_source_ranks(4, 2), (std::vector<int>{0, 2}));
}

// The real thing on the CPU backend: prefill on a group of one TP size, move the pages and
// the sliced KDA state into a group of another TP size, decode there. The tokens must be
// those of a single-rank run.
std::vector<int32_t> prefill_then_decode(int p_tp, int d_tp, const std::vector<int32_t>& prompt, int steps) {
  const std::string dir = testing::tiny_model_dir("tiny-k3-wide");
  auto p = std::move(TpModelGroup::load(dir, p_tp, 8, 64, 1)).value();
  auto d = std::move(TpModelGroup::load(dir, d_tp, 8, 64, 1)).value();
  const int64_t V = p->config().vocab_size;
  SequenceInput seq;
  seq.pages = *p->allocate_pages(4);
  seq.state_slot = *p->allocate_slot();
  seq.tokens = prompt;
  ForwardOutput fo;
  EXPECT_TRUE(p->forward(ForwardBatch{{seq}}, &fo).is_ok());
  auto argmax = [V](const float* row) {
    int32_t b = 0;
    for (int64_t v = 1; v < V; ++v)
      if (row[v] > row[b]) b = static_cast<int32_t>(v);
    return b;
  };
  int32_t next = argmax(fo.row(0));  // prefill's one forced token

  // Decode pre-allocates its own page ids and slot; prefill writes into them.
  SequenceInput dseq;
  dseq.pages = *d->allocate_pages(4);
  dseq.state_slot = *d->allocate_slot();
  const auto latent_src = latent_source_ranks(p_tp, d_tp);
  for (int dr = 0; dr < d_tp; ++dr) {
    MlaKvPool& from = p->kv(latent_src[dr]);
    MlaKvPool& to = d->kv(dr);
    for (int64_t l = 0; l < from.num_layers(); ++l)
      for (size_t i = 0; i < seq.pages.size(); ++i)
        std::memcpy(to.layer_base(l) + dseq.pages[i] * to.page_floats(), from.layer_base(l) + seq.pages[i] * from.page_floats(),
                    from.page_floats() * sizeof(float));
  }
  const ModelConfig& c = p->config();
  auto plan = plan_state_copy({c.num_kda_layers(), c.kda_num_heads, c.kda_head_dim, c.conv_kernel - 1}, p_tp, d_tp);
  EXPECT_TRUE(plan.is_ok());
  for (const StateRun& r : *plan)
    std::memcpy(d->state(r.dst_rank).slot_base(dseq.state_slot) + r.dst_offset,
                p->state(r.src_rank).slot_base(seq.state_slot) + r.src_offset, r.length * sizeof(float));

  std::vector<int32_t> out;
  dseq.cached_len = static_cast<int64_t>(prompt.size());
  for (int i = 0; i < steps; ++i) {
    out.push_back(next);
    dseq.tokens = {next};
    EXPECT_TRUE(d->forward(ForwardBatch{{dseq}}, &fo).is_ok());
    dseq.cached_len += 1;
    next = argmax(fo.row(0));
  }
  return out;
}

TEST(Slicing, DecodeAfterTransplantEqualsSingleRank) {
  std::mt19937 g(5);
  std::vector<int32_t> prompt(90);
  for (auto& x : prompt) x = static_cast<int32_t>(g() % 1024);
  const auto ref = prefill_then_decode(1, 1, prompt, 10);
  for (auto [p, d] : {std::pair{2, 4}, {4, 2}, {1, 4}, {4, 1}, {2, 2}})
    EXPECT_EQ(prefill_then_decode(p, d, prompt, 10), ref) << "prefill TP" << p << " -> decode TP" << d;
}

}  // namespace
}  // namespace pdserve::disagg
