// Tensor parallelism on the CPU backend: ranks as threads must compute what one rank does,
// and each rank's KDA state must be exactly its heads' slice of the whole state (the layout
// the prefill->decode transfer slices when the two sides' TP sizes differ).
#include <gtest/gtest.h>

#include <random>

#include "../ops/test_rng.h"
#include "pdserve/model/tp_group.h"
#include "test_models.h"

namespace pdserve {
namespace {

using testing::random_ids;

struct TpRun {
  std::vector<float> prefill_logits;  // all positions
  std::vector<int32_t> greedy;
  std::unique_ptr<TpModelGroup> group;
  int32_t slot = -1;
};

// Prefill `ids` in chunks of 40, then decode greedily; keeps the slot for inspection.
TpRun run_tp(int tp, const std::vector<int32_t>& ids, int steps) {
  TpRun out;
  auto g = TpModelGroup::load(testing::tiny_model_dir("tiny-k3-wide"), tp, 16, 64, 2);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  out.group = std::move(g).value();
  SequenceInput seq;
  seq.pages = *out.group->allocate_pages(4);
  seq.state_slot = out.slot = *out.group->allocate_slot();
  seq.all_logits = true;
  for (size_t s = 0; s < ids.size(); s += 40) {
    seq.tokens.assign(ids.begin() + s, ids.begin() + std::min(ids.size(), s + 40));
    ForwardOutput fo;
    EXPECT_TRUE(out.group->forward(ForwardBatch{{seq}}, &fo).is_ok());
    out.prefill_logits.insert(out.prefill_logits.end(), fo.logits.begin(), fo.logits.end());
    seq.cached_len += static_cast<int64_t>(seq.tokens.size());
  }
  seq.all_logits = false;
  int32_t next = 0;
  const float* last = &out.prefill_logits[out.prefill_logits.size() - out.group->config().vocab_size];
  for (int64_t v = 1; v < out.group->config().vocab_size; ++v)
    if (last[v] > last[next]) next = static_cast<int32_t>(v);
  for (int i = 0; i < steps; ++i) {
    out.greedy.push_back(next);
    seq.tokens = {next};
    ForwardOutput fo;
    EXPECT_TRUE(out.group->forward(ForwardBatch{{seq}}, &fo).is_ok());
    seq.cached_len += 1;
    const float* row = fo.row(0);
    next = 0;
    for (int64_t v = 1; v < out.group->config().vocab_size; ++v)
      if (row[v] > row[next]) next = static_cast<int32_t>(v);
  }
  return out;
}

TEST(TensorParallel, Tp2AndTp4EqualTp1) {
  const auto ids = random_ids(100, 21);
  TpRun tp1 = run_tp(1, ids, 12);
  for (int tp : {2, 4}) {
    TpRun other = run_tp(tp, ids, 12);
    EXPECT_LT(testing::normalized_error(other.prefill_logits, tp1.prefill_logits), 2e-5) << "TP" << tp;
    EXPECT_EQ(other.greedy, tp1.greedy) << "TP" << tp;
  }
}

TEST(TensorParallel, KdaStateIsShardedByHead) {
  const auto ids = random_ids(70, 22);
  TpRun tp1 = run_tp(1, ids, 0);
  TpRun tp2 = run_tp(2, ids, 0);
  const KdaStatePool& whole = tp1.group->state(0);
  const int64_t H = whole.heads(), D = whole.head_dim(), K1 = whole.conv_floats() / (3 * H * D);
  for (int r = 0; r < 2; ++r) {
    KdaStatePool& part = tp2.group->state(r);
    ASSERT_EQ(part.heads(), H / 2);
    for (int64_t layer = 0; layer < whole.num_layers(); ++layer) {
      const float* wc = const_cast<KdaStatePool&>(whole).conv(tp1.slot, layer);
      const float* pc = part.conv(tp2.slot, layer);
      const int64_t block = H * D * K1, part_block = block / 2;
      for (int b = 0; b < 3; ++b) {  // q, k, v conv blocks, each sliced by head
        std::vector<float> want(wc + b * block + r * part_block, wc + b * block + (r + 1) * part_block);
        std::vector<float> got(pc + b * part_block, pc + (b + 1) * part_block);
        EXPECT_LT(testing::normalized_error(got, want), 1e-4) << "layer " << layer << " conv block " << b;
      }
      const float* wr = const_cast<KdaStatePool&>(whole).recurrent(tp1.slot, layer);
      const float* pr = part.recurrent(tp2.slot, layer);
      const int64_t rec = part.recurrent_floats();
      std::vector<float> want(wr + r * rec, wr + (r + 1) * rec), got(pr, pr + rec);
      EXPECT_LT(testing::normalized_error(got, want), 1e-4) << "layer " << layer << " recurrent";
    }
  }
}

TEST(TensorParallel, SizesThatDoNotDivideAreRefused) {
  auto g = TpModelGroup::load(testing::tiny_model_dir("tiny-k3-wide"), 3, 4, 64, 1);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("tensor parallel size 3 does not divide num_attention_heads"), std::string::npos)
      << g.status().message();
}

}  // namespace
}  // namespace pdserve
