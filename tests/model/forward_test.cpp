// The batch contract: chunking, decode, mixing and paging must not change the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "../ops/test_rng.h"
#include "forward_test_util.h"
#include "pdserve/core/file_util.h"
#include "test_models.h"

namespace pdserve {
namespace {

using testing::random_ids;

class Forward : public ::testing::TestWithParam<const char*> {
 protected:
  testing::ModelRunner runner() { return testing::ModelRunner(testing::tiny_model_dir(GetParam())); }
};

TEST_P(Forward, PrefillThenDecodeEqualsOneFullForward) {
  auto run = runner();
  const auto ids = random_ids(40, 1);
  const int64_t V = run.vocab();
  std::vector<float> full = run.prefill_logits(ids);
  // Prefill 25 tokens, then feed the rest one token at a time (the decode path).
  std::vector<float> stepped = run.prefill_logits(ids, /*chunk=*/25);
  std::vector<float> decode = run.prefill_logits(std::vector<int32_t>(ids.begin(), ids.end()), /*chunk=*/1);
  ASSERT_EQ(full.size(), ids.size() * V);
  EXPECT_LT(testing::normalized_error(stepped, full), 2e-5);
  EXPECT_LT(testing::normalized_error(decode, full), 2e-5);
}

// fp32 summation order differs between chunkings; tiny-k3 amplifies it to about 1e-4 over
// 150 tokens (its o_norm and attention-residual softmaxes), hence 3e-4.
TEST_P(Forward, ChunkedPrefillEqualsUnchunked) {
  auto run = runner();
  const auto ids = random_ids(150, 2);
  std::vector<float> whole = run.prefill_logits(ids);
  for (int64_t chunk : {1, 7, 64, 150}) {
    std::vector<float> chunked = run.prefill_logits(ids, chunk);
    EXPECT_LT(testing::normalized_error(chunked, whole), 3e-4) << "chunk " << chunk;
  }
  // The KDA chunk length of the chunked delta rule does not change the result either.
  for (int64_t kda_chunk : {1, 16, 64}) {
    std::vector<float> other = run.prefill_logits(ids, 1 << 30, kda_chunk);
    EXPECT_LT(testing::normalized_error(other, whole), 3e-4) << "kda chunk " << kda_chunk;
  }
}

TEST_P(Forward, MixedBatchEqualsEachRequestAlone) {
  auto run = runner();
  auto c = run.caches();
  // Three requests at different stages: a fresh prefill, a decode step, a middle chunk.
  struct Req {
    std::vector<int32_t> history, step;
  };
  std::vector<Req> reqs = {{{}, random_ids(30, 3)}, {random_ids(20, 4), random_ids(1, 5)}, {random_ids(10, 6), random_ids(15, 7)}};
  auto prepare = [&](const Req& r) {
    SequenceInput s;
    s.pages = run.kv->allocate(run.kv->pages_for_tokens(static_cast<int64_t>(r.history.size() + r.step.size()))).value();
    s.state_slot = run.state->allocate().value();
    if (!r.history.empty()) {
      s.tokens = r.history;
      ForwardOutput fo;
      EXPECT_TRUE(run.model->forward(ForwardBatch{{s}}, c, &fo).is_ok());
      s.cached_len = static_cast<int64_t>(r.history.size());
    }
    s.tokens = r.step;
    s.all_logits = true;
    return s;
  };
  std::vector<std::vector<float>> alone;
  for (const Req& r : reqs) {
    SequenceInput s = prepare(r);
    ForwardOutput fo;
    ASSERT_TRUE(run.model->forward(ForwardBatch{{s}}, c, &fo).is_ok());
    alone.push_back(fo.logits);
    ASSERT_TRUE(run.kv->free(s.pages).is_ok());
    ASSERT_TRUE(run.state->free(s.state_slot).is_ok());
  }
  ForwardBatch batch;
  for (const Req& r : reqs) batch.seqs.push_back(prepare(r));
  ForwardOutput fo;
  ASSERT_TRUE(run.model->forward(batch, c, &fo).is_ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<float> mine(fo.row(i, 0), fo.row(i, 0) + fo.num_rows[i] * fo.vocab);
    EXPECT_EQ(mine, alone[i]) << "request " << i;  // bitwise: rows never interact
  }
}

TEST_P(Forward, PageSizesAgree) {
  const auto ids = random_ids(130, 8);
  std::vector<float> ref;
  for (int64_t ps : {16, 64, 128}) {
    testing::ModelRunner run(testing::tiny_model_dir(GetParam()), 64, ps);
    auto logits = run.prefill_logits(ids, 50);
    if (ref.empty()) ref = logits;
    else EXPECT_EQ(logits, ref) << "page size " << ps;
  }
}

TEST_P(Forward, BadBatchesAreRefusedWithoutTouchingPools) {
  auto run = runner();
  auto c = run.caches();
  SequenceInput s;
  s.tokens = {1, 2, 3};
  s.pages = {0};
  s.state_slot = 0;
  ForwardOutput fo;
  auto expect_error = [&](SequenceInput bad, const std::string& needle) {
    Status st = run.model->forward(ForwardBatch{{bad}}, c, &fo);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  auto t = s;
  t.tokens = {1, 999999};
  expect_error(t, "outside the vocabulary");
  t = s;
  t.pages = {};
  expect_error(t, "needs 1 pages");
  t = s;
  t.pages = {9999};
  expect_error(t, "does not exist");
  t = s;
  t.state_slot = 99;
  expect_error(t, "state slot 99");
  t = s;
  t.tokens = {};
  expect_error(t, "no tokens");
  Status dup = run.model->forward(ForwardBatch{{s, s}}, c, &fo);
  EXPECT_FALSE(dup.is_ok());
  EXPECT_EQ(run.kv->free_pages(), run.kv->num_pages());
}

INSTANTIATE_TEST_SUITE_P(Presets, Forward, ::testing::Values("tiny-k3", "tiny-kimi-linear"));

TEST(Pools, ExactAccountingAndDoubleFree) {
  MlaKvPool kv(2, 8, 16, 4);
  auto a = kv.allocate(3);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(kv.allocate(6).is_ok());
  EXPECT_EQ(kv.free_pages(), 5);
  EXPECT_TRUE(kv.free(*a).is_ok());
  EXPECT_FALSE(kv.free({1}).is_ok());
  EXPECT_EQ(kv.free_pages(), 8);
  KdaStatePool st(2, 2, 1, 4, 4);
  auto s0 = st.allocate(), s1 = st.allocate();
  ASSERT_TRUE(s0.is_ok() && s1.is_ok());
  EXPECT_FALSE(st.allocate().is_ok());
  EXPECT_TRUE(st.free(*s0).is_ok());
  EXPECT_FALSE(st.free(*s0).is_ok());
  EXPECT_EQ(st.free_slots(), 1);
}

TEST(Pools, Bf16PoolHalvesTheBytesKeepsTheAccountingAndRefusesFloatAccess) {
  MlaKvPool f32(2, 8, 16, 4), b16(2, 8, 16, 4, DType::kBF16);
  EXPECT_EQ(f32.dtype(), DType::kF32);
  EXPECT_EQ(b16.dtype(), DType::kBF16);
  EXPECT_EQ(f32.elem_bytes(), 4);
  EXPECT_EQ(b16.elem_bytes(), 2);
  EXPECT_EQ(b16.page_elems(), 16 * 4);
  EXPECT_EQ(b16.page_bytes(), 16 * 4 * 2);
  EXPECT_EQ(b16.layer_stride_bytes(), 8 * 16 * 4 * 2);
  EXPECT_EQ(b16.total_bytes(), 2 * 8 * 16 * 4 * 2);
  EXPECT_EQ(f32.total_bytes(), 2 * b16.total_bytes());
  EXPECT_EQ(f32.page_floats(), f32.page_elems());
  EXPECT_EQ(f32.layer_stride() * 4, f32.layer_stride_bytes());
  // Byte, page and typed accessors agree on where a page is.
  EXPECT_EQ(b16.page_ptr(1, 3), b16.layer_bytes(1) + 3 * b16.page_bytes());
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(b16.layer_base_bf16(1) + 3 * b16.page_elems()), b16.page_ptr(1, 3));
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(f32.layer_base(1) + 3 * f32.page_floats()), f32.page_ptr(1, 3));
  EXPECT_EQ(b16.layer_base_bf16(1)[5], 0);  // zeroed
  // The same accounting as fp32.
  auto a = b16.allocate(3);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(b16.allocate(6).is_ok());
  EXPECT_TRUE(b16.free(*a).is_ok());
  EXPECT_FALSE(b16.free({1}).is_ok());
  EXPECT_EQ(b16.free_pages(), 8);
  // The float accessors are for fp32 pools: a bf16 pool aborts with the accessor's name, and the other way round.
  EXPECT_DEATH((void)b16.layer_base(0), "layer_base called on a bfloat16 pool");
  EXPECT_DEATH((void)b16.page_floats(), "page_floats called on a bfloat16 pool");
  EXPECT_DEATH((void)b16.layer_stride(), "layer_stride called on a bfloat16 pool");
  EXPECT_DEATH((void)f32.layer_base_bf16(0), "layer_base_bf16 called on a float32 pool");
  DType d = DType::kF32;
  EXPECT_TRUE(kv_cache_dtype_from_name("bfloat16", &d));
  EXPECT_EQ(d, DType::kBF16);
  EXPECT_FALSE(kv_cache_dtype_from_name("bf16", &d));
  EXPECT_STREQ(kv_cache_dtype_name(DType::kF32), "float32");
}

// A bf16 latent cache against the fp32 one on the tiny models. Each cache entry is rounded to
// nearest even once (relative error <= 2^-9 = 1.95e-3 per value) and read back exactly; the
// scores and the attention output are sums over those entries, so logits move by about the
// same relative amount, amplified a little by the layers after (tiny-k3's MLA layers feed
// norms and softmaxes). Measured (max |dlogit| / max |logit|, 40 tokens in two chunks):
// 1.25e-3 (tiny-k3) and 1.26e-3 (tiny-kimi-linear), about 0.64 x 2^-9; the bound is
// 4 x 2^-9 = 7.8e-3, 6x the measured figure.
TEST_P(Forward, Bf16CacheStaysCloseToFp32AndRoundsEveryWrittenEntry) {
  const std::string dir = testing::tiny_model_dir(GetParam());
  testing::ModelRunner f32(dir, 64, 16), b16(dir, 64, 16, 8, DType::kBF16);
  const auto ids = random_ids(40, 11);
  // Two chunks (25 + 15): the second reads the pages the first wrote.
  std::vector<float> ref = f32.prefill_logits(ids, 25), got = b16.prefill_logits(ids, 25);
  ASSERT_EQ(got.size(), ref.size());
  const double err = testing::normalized_error(got, ref);
  std::printf("bf16 vs fp32 cache, %s: normalized logit error %.3g\n", GetParam(), err);
  EXPECT_LT(err, 4.0 / 512);
  EXPECT_GT(err, 0.0);  // the bf16 path really ran
  // Writes round to nearest even: the first MLA layer's entries depend on nothing read from
  // the cache, so the bf16 pool holds exactly the fp32 pool's values rounded.
  const int64_t n = static_cast<int64_t>(ids.size()) * f32.kv->entry_dim();  // pages 0.. in order
  const float* a = f32.kv->layer_base(0);
  const uint16_t* b = b16.kv->layer_base_bf16(0);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) mismatches += b[i] != f32_to_bf16(a[i]);
  EXPECT_EQ(mismatches, 0);
}

TEST(MakeModel, DeterministicAndSeeded) {
  const std::string a = testing::temp_dir("mm") + "/a", b = testing::temp_dir("mm") + "/b", c = testing::temp_dir("mm") + "/c";
  ASSERT_TRUE(make_model("tiny-k3", a, 5).is_ok());
  ASSERT_TRUE(make_model("tiny-k3", b, 5).is_ok());
  ASSERT_TRUE(make_model("tiny-k3", c, 6).is_ok());
  for (const char* f : {"config.json", "model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors", "tiktoken.model"}) {
    EXPECT_EQ(*read_file(a + "/" + f), *read_file(b + "/" + f)) << f;
  }
  EXPECT_NE(*read_file(a + "/model-00002-of-00003.safetensors"), *read_file(c + "/model-00002-of-00003.safetensors"));
  EXPECT_FALSE(make_model("no-such-preset", a).is_ok());
}

}  // namespace
}  // namespace pdserve
