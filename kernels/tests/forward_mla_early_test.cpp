// The CUDA backend's MLA split-KV run in its early form (CudaForwardOptions::early_mla_decode:
// MlaDecodeRing::kLeanEarly after a q absorb that lets it launch at its start, new_tokens 0;
// kernels/backend/cuda_layers.cpp) on tiny-k3-mla512, the preset with K3's MLA cache widths at
// 3 heads (the lean kernels' shapes; the other presets' latent 32 runs the generic fallback):
// against the CPU Model, graphs against eager, and the option on against off (the same sums:
// bit-identical logits), at contexts that cross tile (16 tokens) and page boundaries, with
// prefill chunks (each query row its own item, the chunk's entries written just before) and
// items of more tiles than the ring's three stages (the copies after the pdl wait).
// Skips itself, saying so, without an sm_90 GPU.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>

#include "backend/cuda_model.h"
#include "test_models.h"
#include "forward_schedule.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
constexpr const char* kPreset = "tiny-k3-mla512";
// Device against CPU. Both fp32, every dot product summed in another order; K3's latent 512 +
// key 64 per score (against the tiny presets' 48) widens the spread past forward_test.cpp's
// 1e-4: on the H200 1.03e-4 over this test's steps, the same to three digits with
// early_mla_decode off (the engine before: kLean, measured in the same call), page 16 or 32.
// The option itself must not move a bit (the early form's sums are kLean's): checked exactly.
constexpr double kBound = 3e-4;

std::shared_ptr<const Model> load_model() {
  auto m = Model::load(testing::tiny_model_dir(kPreset));
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return std::shared_ptr<const Model>(std::move(m).value());
}

CudaForwardOptions options(bool graphs, bool early, bool pdl = true) {
  CudaForwardOptions o;
  o.graphs = graphs;
  o.early_mla_decode = early;
  o.pdl_mla_decode = pdl;
  return o;
}

// (early_mla_decode, page size).
class EarlyMlaForward : public GpuTest, public ::testing::WithParamInterface<std::tuple<bool, int64_t>> {};

// Three sequences: A (300 tokens) prefilled in chunks of 96, 96, 96, 12 (a chunk's 96 rows of
// up to 300 tokens: items of several tiles, more than three in the later chunks), B (45) and
// C (7) each in one chunk beside A's; then 24 decode steps of all three (A 300 -> 324, B 45 ->
// 69, C 7 -> 31: across tiles 304 / 320, 48 / 64, 16 and pages of 16 or 32), a decode graph
// (bucket 4, one padding row) captured at the first step and replayed as the contexts grow.
// The CPU, the device with graphs and the device eager see the same batches: device within
// the fp32 bound of the CPU, graphs bit-identical to eager, and (option on) both bit-identical
// to a device model with the option off.
TEST_P(EarlyMlaForward, MatchesCpuAndEagerAcrossTilesAndPages) {
  const auto [early, page_size] = GetParam();
  auto model = load_model();
  constexpr int64_t kPages = 64, kSlots = 4;
  auto kv = MlaKvPool::for_model(model->config(), kPages, page_size);
  auto state = KdaStatePool::for_model(model->config(), kSlots);
  auto graphs = CudaModel::create(model, kPages, page_size, kSlots, options(true, early));
  auto eager = CudaModel::create(model, kPages, page_size, kSlots, options(false, early));
  auto lean = CudaModel::create(model, kPages, page_size, kSlots, options(false, false));
  ASSERT_TRUE(graphs.is_ok() && eager.is_ok() && lean.is_ok());
  const int64_t V = model->config().vocab_size;
  SequenceInput A, B, C;
  start_three_sequences(*kv, *state, A, B, C);
  double worst = 0;
  int step = 0;
  auto run = [&](std::vector<SequenceInput*> seqs) {
    ForwardBatch batch;
    for (auto* s : seqs) batch.seqs.push_back(*s);
    ForwardOutput co, go, eo, lo;
    ModelCaches caches{kv.get(), state.get()};
    Status s1 = model->forward(batch, caches, &co), s2 = (*graphs)->forward(batch, &go), s3 = (*eager)->forward(batch, &eo);
    Status s4 = (*lean)->forward(batch, &lo);
    ASSERT_TRUE(s1.is_ok()) << s1.message();
    ASSERT_TRUE(s2.is_ok()) << s2.message();
    ASSERT_TRUE(s3.is_ok()) << s3.message();
    ASSERT_TRUE(s4.is_ok()) << s4.message();
    ASSERT_EQ(co.logits.size(), go.logits.size());
    worst = std::max(worst, nerr(go.logits, co.logits));
    EXPECT_EQ(differing(go, eo), 0u) << "step " << step << ": graphs vs eager";
    EXPECT_EQ(differing(eo, lo), 0u) << "step " << step << ": eager vs eager with early_mla_decode off";
    ++step;
    follow_cpu_greedy(seqs, co, V);
  };
  run_three_sequence_schedule(A, B, C, run);
  std::printf("%s, early MLA decode %d, page %lld: logits error %.3g over %d steps; graphs %lld captured, %lld replays\n", kPreset, early,
              static_cast<long long>(page_size), worst, step, static_cast<long long>((*graphs)->graphs_captured()),
              static_cast<long long>((*graphs)->graph_replays()));
  EXPECT_LT(worst, kBound);
  EXPECT_EQ((*graphs)->graphs_captured(), 1);
  EXPECT_EQ((*graphs)->graph_replays(), 23);
}

INSTANTIATE_TEST_SUITE_P(Mla512, EarlyMlaForward, ::testing::Combine(::testing::Bool(), ::testing::Values(int64_t{16}, int64_t{32})));

class EarlyMlaLong : public GpuTest {};

// Long contexts, device only (the CPU's attention would take minutes): two sequences of 6500
// and 7000 tokens prefilled in one step (13,500 query rows, each row its own item of up to
// 7000 tokens, every entry written by the step itself), then decode steps whose items hold
// four tiles (more than the ring's three stages: the later tiles copied after the wait) with a
// third, short sequence joining (bucket 2 -> 4) and contexts crossing pages of 32 (7008, 6528).
// The early form (graphs, eager, and without pdl) must give the same bits as kLean's engine
// (early_mla_decode off), prefill and decode.
TEST_F(EarlyMlaLong, EarlyEqualsLeanAtLongContexts) {
  auto model = load_model();
  constexpr int64_t kPages = 512, kPageSize = 32, kSlots = 4;
  auto kv = MlaKvPool::for_model(model->config(), kPages, kPageSize);  // page ids only
  std::vector<std::unique_ptr<CudaModel>> m;
  const char* names[] = {"early, graphs", "early, eager", "early without pdl, eager", "off (kLean), eager"};
  for (const CudaForwardOptions& o : {options(true, true), options(false, true), options(false, true, false), options(false, false)}) {
    auto g = CudaModel::create(model, kPages, kPageSize, kSlots, o);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    m.push_back(std::move(g).value());
  }
  const int64_t V = model->config().vocab_size;
  std::vector<SequenceInput> seqs(3);
  const int64_t lens[] = {6500, 7000, 40};
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].tokens = testing::random_ids(lens[i], 40 + static_cast<int>(i));
    seqs[i].pages = kv->allocate(kv->pages_for_tokens(lens[i] + 32)).value();
    seqs[i].state_slot = static_cast<int32_t>(i);
  }
  int step = 0;
  auto run = [&](std::vector<size_t> which) {
    ForwardBatch batch;
    for (size_t i : which) batch.seqs.push_back(seqs[i]);
    std::vector<ForwardOutput> out(m.size());
    for (size_t k = 0; k < m.size(); ++k) {
      Status s = m[k]->forward(batch, &out[k]);
      ASSERT_TRUE(s.is_ok()) << names[k] << ": " << s.message();
    }
    for (size_t k = 0; k + 1 < m.size(); ++k) EXPECT_EQ(differing(out[k], out.back()), 0u) << "step " << step << ": " << names[k] << " vs " << names[m.size() - 1];
    ++step;
    for (size_t k = 0; k < which.size(); ++k) {
      SequenceInput& s = seqs[which[k]];
      s.cached_len += static_cast<int64_t>(s.tokens.size());
      s.tokens = {argmax(out.back().row(k), V)};
    }
  };
  run({0, 1});
  for (int i = 0; i < 6; ++i) run({0, 1});
  run({2});  // the short one's prefill
  for (int i = 0; i < 14; ++i) run({0, 1, 2});
  std::printf("%s: %d steps at 6500-7021 tokens, early == kLean; graphs %lld captured, %lld replays\n", kPreset, step,
              static_cast<long long>(m[0]->graphs_captured()), static_cast<long long>(m[0]->graph_replays()));
  EXPECT_EQ(m[0]->graphs_captured(), 2);
  EXPECT_EQ(m[0]->graph_replays(), 18);
}

}  // namespace
}  // namespace pdserve::cuda
