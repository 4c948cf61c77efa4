// Decode CUDA graphs against the eager path, and the device <-> host cache copies of the
// disaggregated roles. Skips itself, saying so, without an sm_90 GPU.
#include <algorithm>
#include <cstdio>
#include <set>

#include "backend/cuda_model.h"
#include "test_models.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;

std::shared_ptr<const Model> load(const std::string& preset) {
  auto m = Model::load(testing::tiny_model_dir(preset));
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return std::shared_ptr<const Model>(std::move(m).value());
}

class CudaGraphs : public GpuTest, public ::testing::WithParamInterface<const char*> {};

// Device models with graphs on and off, fed the same batches: prefill, then decode steps whose
// batch sizes walk through several buckets (padded and exact) and back. With the fused KDA
// decode step (the default) and without it (the per-op slot-table kernels), the graphs run
// the same kernels per row as the eager model (padding rows of a bucket are slot -1 rows), so
// their logits must be identical, not merely close; fused and per-op sum in other orders, so
// they must stay within the forward tests' bound.
TEST_P(CudaGraphs, GraphDecodeEqualsEagerAcrossBuckets) {
  auto model = load(GetParam());
  constexpr int64_t kPages = 256, kPageSize = 16, kSlots = 24;
  auto graphs = CudaModel::create(model, kPages, kPageSize, kSlots, CudaForwardOptions{true, 0, true});
  auto fused = CudaModel::create(model, kPages, kPageSize, kSlots, CudaForwardOptions{false, 0, true});
  auto graphs_per_op = CudaModel::create(model, kPages, kPageSize, kSlots, CudaForwardOptions{true, 0, false});
  auto eager = CudaModel::create(model, kPages, kPageSize, kSlots, CudaForwardOptions{false, 0, false});
  // Graphs with the other pdl_mla_decode setting (the MLA run + merge as programmatic dependent
  // launches or not): same kernels, same bits.
  CudaForwardOptions pdl_opts{true, 0, true};
  pdl_opts.pdl_mla_decode = !pdl_opts.pdl_mla_decode;
  auto graphs_pdl = CudaModel::create(model, kPages, kPageSize, kSlots, pdl_opts);
  ASSERT_TRUE(graphs.is_ok() && eager.is_ok() && fused.is_ok() && graphs_per_op.is_ok() && graphs_pdl.is_ok());
  auto kv = MlaKvPool::for_model(model->config(), kPages, kPageSize);  // page ids only
  const int64_t V = model->config().vocab_size;
  std::vector<SequenceInput> seqs(20);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t len = 5 + 3 * static_cast<int64_t>(i);
    seqs[i].tokens = testing::random_ids(len, 100 + static_cast<int>(i));
    seqs[i].pages = kv->allocate(kv->pages_for_tokens(len + 40)).value();
    seqs[i].state_slot = static_cast<int32_t>(i);
  }
  auto identical = [](const ForwardOutput& a, const ForwardOutput& b, const char* what, size_t n) {
    ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
    EXPECT_EQ(a.first_row, b.first_row) << what;
    size_t differ = 0;
    for (size_t j = 0; j < a.logits.size(); ++j) differ += a.logits[j] != b.logits[j];
    EXPECT_EQ(differ, 0u) << n << " sequences, " << what << ": " << differ << " logits differ";
  };
  auto run = [&](std::vector<size_t> which) {
    ForwardBatch b;
    for (size_t i : which) b.seqs.push_back(seqs[i]);
    ForwardOutput go, eo, fo, po, qo;
    Status s1 = (*graphs)->forward(b, &go), s2 = (*eager)->forward(b, &eo), s3 = (*fused)->forward(b, &fo);
    Status s4 = (*graphs_per_op)->forward(b, &po), s5 = (*graphs_pdl)->forward(b, &qo);
    ASSERT_TRUE(s1.is_ok()) << s1.message();
    ASSERT_TRUE(s2.is_ok()) << s2.message();
    ASSERT_TRUE(s3.is_ok()) << s3.message();
    ASSERT_TRUE(s4.is_ok()) << s4.message();
    ASSERT_TRUE(s5.is_ok()) << s5.message();
    ASSERT_EQ(fo.logits.size(), eo.logits.size());
    EXPECT_LE(nerr(fo.logits, eo.logits), 1e-4) << which.size() << " sequences: fused KDA decode step vs per-op";
    identical(go, fo, "graphs vs eager (fused KDA step)", which.size());
    identical(po, eo, "graphs vs eager (per-op KDA kernels)", which.size());
    identical(qo, fo, "graphs with the other MLA pdl setting vs eager", which.size());
    for (size_t k = 0; k < which.size(); ++k) {
      SequenceInput& s = seqs[which[k]];
      s.cached_len += static_cast<int64_t>(s.tokens.size());
      s.tokens = {argmax(eo.row(k), V)};
    }
  };
  // Prefill in two batches (eager on both), then decode.
  run({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  run({10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  const std::vector<size_t> sizes = {1, 2, 3, 4, 5, 8, 13, 16, 20, 3, 1, 7, 20, 2};
  for (size_t step = 0; step < sizes.size(); ++step) {
    std::vector<size_t> which;
    for (size_t k = 0; k < sizes[step]; ++k) which.push_back((k * 7 + step) % seqs.size());
    std::sort(which.begin(), which.end());
    which.erase(std::unique(which.begin(), which.end()), which.end());
    run(which);
  }
  std::printf("%s: %lld graphs captured, %lld replays\n", GetParam(), static_cast<long long>((*graphs)->graphs_captured()),
              static_cast<long long>((*graphs)->graph_replays()));
  // One capture per bucket used (scratch is sized for the largest bucket up front, so none
  // retires another), every other decode step a replay.
  std::set<int64_t> buckets;
  for (size_t n : sizes) buckets.insert(n <= 1 ? 1 : int64_t{1} << (64 - __builtin_clzll(n - 1)));
  for (auto* g : {&graphs, &graphs_per_op}) {
    EXPECT_EQ((**g)->graphs_captured(), static_cast<int64_t>(buckets.size()));
    EXPECT_EQ((**g)->graphs_captured() + (**g)->graph_replays(), static_cast<int64_t>(sizes.size()));
  }
  EXPECT_EQ((*eager)->graphs_captured(), 0);
  EXPECT_EQ((*fused)->graphs_captured(), 0);
}

// download then upload into a second device model reproduces the first one's next step: the
// pages and the slot round-trip through the host pools intact.
TEST_P(CudaGraphs, CacheCopyRoundTripsThroughHostPools) {
  auto model = load(GetParam());
  constexpr int64_t kPages = 32, kPageSize = 16, kSlots = 4;
  auto a = CudaModel::create(model, kPages, kPageSize, kSlots);
  auto b = CudaModel::create(model, kPages, kPageSize, kSlots);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto kv = MlaKvPool::for_model(model->config(), kPages, kPageSize);
  auto state = KdaStatePool::for_model(model->config(), kSlots);
  SequenceInput s;
  s.tokens = testing::random_ids(37, 5);
  s.pages = {7, 8, 3, 20};  // two runs and two singles
  s.state_slot = 2;
  ForwardBatch batch;
  batch.seqs = {s};
  ForwardOutput out;
  ASSERT_TRUE((*a)->forward(batch, &out).is_ok());
  const CacheRegion region{std::vector<int32_t>(s.pages.begin(), s.pages.begin() + 3), s.state_slot};
  ASSERT_TRUE((*a)->download(region, *kv, *state).is_ok());
  ASSERT_TRUE((*b)->upload(region, *kv, *state).is_ok());
  s.cached_len = 37;
  s.tokens = {argmax(out.row(0), model->config().vocab_size)};
  batch.seqs = {s};
  ForwardOutput oa, ob;
  ASSERT_TRUE((*a)->forward(batch, &oa).is_ok());
  ASSERT_TRUE((*b)->forward(batch, &ob).is_ok());
  EXPECT_EQ(oa.logits, ob.logits);
  // Ids outside the pools are refused before anything moves.
  EXPECT_FALSE((*a)->download(CacheRegion{{kPages}, -1}, *kv, *state).is_ok());
  EXPECT_FALSE((*a)->upload(CacheRegion{{}, kSlots}, *kv, *state).is_ok());
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaGraphs, ::testing::Values("tiny-k3", "tiny-k3-wide", "tiny-kimi-linear"));

}  // namespace
}  // namespace pdserve::cuda
