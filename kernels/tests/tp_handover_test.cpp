// Prefill on two GPUs (TP2), decode on one (TP1), and the other way round: the request's KDA state is re-sliced from
// the two prefill ranks' slots into the decode slot with disagg::plan_state_copy, and its MLA
// latent pages (replicated) are copied from the prefill rank latent_source_ranks names, GPU to
// GPU (cudaMemcpyPeer). Decode then continues greedily and must produce the tokens a single
// GPU produces for the whole request (identical unless the reference's margin between the two
// choices is within 1e-4 of the logit scale, as the other tests here).
// Skips itself, saying so, without two sm_90 GPUs.
#include <cmath>
#include <cstdio>

#include "backend/cuda_model.h"
#include "pdserve/disagg/state_slicing.h"
#include "pdserve/model/tp_group.h"
#include "test_models.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;

int hopper_devices() {
  auto devs = list_devices();
  if (!devs.is_ok()) return 0;
  int n = 0;
  for (const auto& d : *devs) n += d.sm_major == 9 && d.sm_minor == 0;
  return n;
}

int32_t argmax_of(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t v = 1; v < n; ++v)
    if (row[v] > row[best]) best = static_cast<int32_t>(v);
  return best;
}

class TpHandover : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (hopper_devices() < 2) GTEST_SKIP() << "fewer than two sm_90 GPUs here: the TP2 -> TP1 handover is compiled but not run";
  }
};

TEST_P(TpHandover, PrefillTp2OnTwoGpusThenDecodeTp1OnOneMatchesOneGpu) {
  const std::string dir = testing::tiny_model_dir(GetParam());
  const int64_t pages = 32, ps = 16, slots = 2, prompt_len = 37, steps = 24;
  const auto prompt = testing::random_ids(prompt_len, 31);

  // Reference: the whole request on GPU 0, one rank.
  auto ref_group = TpModelGroup::load(dir, 1, pages, ps, slots).value();
  const ModelConfig& cfg = ref_group->config();
  const int64_t V = cfg.vocab_size;
  auto ref = CudaModel::create(ref_group->model_ptr(0), pages, ps, slots).value();
  SequenceInput rs;
  rs.pages = ref_group->allocate_pages((prompt_len + steps + ps - 1) / ps).value();
  rs.state_slot = ref_group->allocate_slot().value();
  rs.tokens = prompt;
  std::vector<int32_t> want;
  std::vector<std::vector<float>> ref_rows;
  for (int64_t i = 0; i <= steps; ++i) {
    ForwardOutput o;
    ASSERT_TRUE(ref->forward(ForwardBatch{{rs}}, &o).is_ok());
    ref_rows.emplace_back(o.row(0), o.row(0) + V);
    want.push_back(argmax_of(o.row(0), V));
    rs.cached_len += static_cast<int64_t>(rs.tokens.size());
    rs.tokens = {want.back()};
  }

  // Prefill: TP2 on GPUs 0 and 1.
  auto pre_group = TpModelGroup::load(dir, 2, pages, ps, slots).value();
  auto fwds = make_cuda_tp_forwards({pre_group->model_ptr(0), pre_group->model_ptr(1)}, pages, ps, slots);
  ASSERT_TRUE(fwds.is_ok()) << fwds.status().message();
  std::vector<CudaModel*> pre{dynamic_cast<CudaModel*>((*fwds)[0].get()), dynamic_cast<CudaModel*>((*fwds)[1].get())};
  ASSERT_TRUE(pre[0] && pre[1]);
  ASSERT_TRUE(pre_group->set_device_forwards(std::move(fwds).value()).is_ok());
  SequenceInput ps_seq;
  ps_seq.pages = pre_group->allocate_pages((prompt_len + steps + ps - 1) / ps).value();
  ps_seq.state_slot = pre_group->allocate_slot().value();
  ps_seq.tokens = prompt;
  ForwardOutput po;
  ASSERT_TRUE(pre_group->forward(ForwardBatch{{ps_seq}}, &po).is_ok());
  const int32_t first = argmax_of(po.row(0), V);

  // Decode: TP1 on GPU 1, the unsharded model, a fresh pool of the same geometry.
  auto dec_model = TpModelGroup::load(dir, 1, pages, ps, slots).value();
  auto dec = CudaModel::create(dec_model->model_ptr(0), pages, ps, slots, 1, nullptr);
  ASSERT_TRUE(dec.is_ok()) << dec.status().message();
  CudaModel& d = **dec;
  const int32_t dec_slot = 1;  // another slot id on purpose: the copy rebases it
  // KDA state: TP2 slices -> the TP1 slot.
  const disagg::KdaStateShape shape{cfg.num_kda_layers(), cfg.kda_num_heads, cfg.kda_head_dim, cfg.conv_kernel - 1};
  auto runs = disagg::plan_state_copy(shape, 2, 1);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  const int64_t src_slot = disagg::slot_floats(shape, 2), dst_slot = disagg::slot_floats(shape, 1);
  ASSERT_EQ(dst_slot * slots, d.state_floats());
  for (const auto& r : *runs) {
    const float* src = pre[r.src_rank]->state_pool() + ps_seq.state_slot * src_slot + r.src_offset;
    float* dst = d.state_pool() + dec_slot * dst_slot + r.dst_offset;
    ASSERT_EQ(cudaMemcpyPeer(dst, d.device(), src, pre[r.src_rank]->device(), r.length * sizeof(float)), cudaSuccess);
  }
  // MLA latent pages: replicated, read from the rank latent_source_ranks names, same page ids.
  const int src_rank = disagg::latent_source_ranks(2, 1)[0];
  const int64_t page_floats = ps * cfg.mla_cache_dim(), layer_stride = pages * page_floats;
  for (int64_t l = 0; l < cfg.num_mla_layers(); ++l)
    for (int32_t p : ps_seq.pages) {
      const int64_t off = l * layer_stride + p * page_floats;
      ASSERT_EQ(cudaMemcpyPeer(d.kv_pool() + off, d.device(), pre[src_rank]->kv_pool() + off, pre[src_rank]->device(),
                               page_floats * sizeof(float)),
                cudaSuccess);
    }

  SequenceInput ds;
  ds.pages = ps_seq.pages;
  ds.state_slot = dec_slot;
  ds.cached_len = prompt_len;
  ds.tokens = {first};
  std::vector<int32_t> got{first};
  for (int64_t i = 0; i < steps; ++i) {
    ForwardOutput o;
    ASSERT_TRUE(d.forward(ForwardBatch{{ds}}, &o).is_ok());
    got.push_back(argmax_of(o.row(0), V));
    ds.cached_len += 1;
    ds.tokens = {got.back()};
  }
  size_t same = 0;
  while (same < want.size() && got[same] == want[same]) ++same;
  std::printf("%s: prefill TP2 (GPUs 0+1) -> decode TP1 (GPU 1): %zu runs of KDA state, %zu/%zu tokens identical to one GPU\n",
              GetParam(), runs->size(), same, want.size());
  if (same < want.size()) {
    const std::vector<float>& r = ref_rows[same];
    float scale = 0;
    for (float x : r) scale = std::max(scale, std::fabs(x));
    EXPECT_LE(r[want[same]] - r[got[same]], 1e-4 * scale) << "diverged at token " << same << " with a clear margin";
  }
}

// The seed's direction: prefill on fewer ranks than decode (TP4 -> TP32 there), so each decode
// rank takes a head slice of the one prefill slot, and the replicated latent pages go to both.
// The decode group allocates its own page ids and slot: the copy maps them.
TEST_P(TpHandover, PrefillTp1OnOneGpuThenDecodeTp2OnTwoMatchesOneGpu) {
  const std::string dir = testing::tiny_model_dir(GetParam());
  const int64_t pages = 32, ps = 16, slots = 2, prompt_len = 41, steps = 24;
  const auto prompt = testing::random_ids(prompt_len, 57);
  const int64_t need_pages = (prompt_len + steps + ps - 1) / ps;

  // Reference and prefill at once: the whole request on GPU 0, one rank; its state and pages
  // right after the prompt are what a TP1 prefill hands over.
  auto pre_group = TpModelGroup::load(dir, 1, pages, ps, slots).value();
  const ModelConfig& cfg = pre_group->config();
  const int64_t V = cfg.vocab_size;
  auto pre = CudaModel::create(pre_group->model_ptr(0), pages, ps, slots).value();
  SequenceInput pseq;
  pseq.pages = pre_group->allocate_pages(need_pages).value();
  pseq.state_slot = pre_group->allocate_slot().value();
  pseq.tokens = prompt;
  ForwardOutput po;
  ASSERT_TRUE(pre->forward(ForwardBatch{{pseq}}, &po).is_ok());
  const int32_t first = argmax_of(po.row(0), V);

  // Decode: TP2 on GPUs 0 and 1, its own pool; take a page first so the ids differ.
  auto dec_group = TpModelGroup::load(dir, 2, pages, ps, slots).value();
  auto fwds = make_cuda_tp_forwards({dec_group->model_ptr(0), dec_group->model_ptr(1)}, pages, ps, slots);
  ASSERT_TRUE(fwds.is_ok()) << fwds.status().message();
  std::vector<CudaModel*> dec{dynamic_cast<CudaModel*>((*fwds)[0].get()), dynamic_cast<CudaModel*>((*fwds)[1].get())};
  ASSERT_TRUE(dec[0] && dec[1]);
  ASSERT_TRUE(dec_group->set_device_forwards(std::move(fwds).value()).is_ok());
  (void)dec_group->allocate_pages(1).value();
  (void)dec_group->allocate_slot().value();
  SequenceInput ds;
  ds.pages = dec_group->allocate_pages(need_pages).value();
  ds.state_slot = dec_group->allocate_slot().value();
  ASSERT_NE(ds.pages[0], pseq.pages[0]);
  ASSERT_NE(ds.state_slot, pseq.state_slot);

  const disagg::KdaStateShape shape{cfg.num_kda_layers(), cfg.kda_num_heads, cfg.kda_head_dim, cfg.conv_kernel - 1};
  auto runs = disagg::plan_state_copy(shape, 1, 2);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  const int64_t src_slot = disagg::slot_floats(shape, 1), dst_slot = disagg::slot_floats(shape, 2);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(dst_slot * slots, dec[r]->state_floats());
  int runs_to[2] = {0, 0};
  for (const auto& r : *runs) {
    const float* src = pre->state_pool() + pseq.state_slot * src_slot + r.src_offset;
    float* dst = dec[r.dst_rank]->state_pool() + ds.state_slot * dst_slot + r.dst_offset;
    ASSERT_EQ(cudaMemcpyPeer(dst, dec[r.dst_rank]->device(), src, pre->device(), r.length * sizeof(float)), cudaSuccess);
    runs_to[r.dst_rank]++;
  }
  EXPECT_GT(runs_to[0], 0);
  EXPECT_GT(runs_to[1], 0);
  const int64_t page_floats = ps * cfg.mla_cache_dim(), layer_stride = pages * page_floats;
  const int64_t prompt_pages = (prompt_len + ps - 1) / ps;
  for (int r = 0; r < 2; ++r)
    for (int64_t l = 0; l < cfg.num_mla_layers(); ++l)
      for (int64_t i = 0; i < prompt_pages; ++i) {
        const int64_t src = l * layer_stride + pseq.pages[i] * page_floats;
        const int64_t dst = l * layer_stride + ds.pages[i] * page_floats;
        ASSERT_EQ(cudaMemcpyPeer(dec[r]->kv_pool() + dst, dec[r]->device(), pre->kv_pool() + src, pre->device(),
                                 page_floats * sizeof(float)),
                  cudaSuccess);
      }

  // The reference continues on the prefill model itself; decode continues on the TP2 group.
  std::vector<int32_t> want{first}, got{first};
  std::vector<std::vector<float>> ref_rows;
  pseq.cached_len = prompt_len;
  pseq.tokens = {first};
  ds.cached_len = prompt_len;
  ds.tokens = {first};
  for (int64_t i = 0; i < steps; ++i) {
    ForwardOutput o, q;
    ASSERT_TRUE(pre->forward(ForwardBatch{{pseq}}, &o).is_ok());
    ref_rows.emplace_back(o.row(0), o.row(0) + V);
    want.push_back(argmax_of(o.row(0), V));
    pseq.cached_len += 1;
    pseq.tokens = {want.back()};
    ASSERT_TRUE(dec_group->forward(ForwardBatch{{ds}}, &q).is_ok());
    got.push_back(argmax_of(q.row(0), V));
    ds.cached_len += 1;
    ds.tokens = {got.back()};
  }
  size_t same = 0;
  while (same < want.size() && got[same] == want[same]) ++same;
  std::printf("%s: prefill TP1 (GPU 0) -> decode TP2 (GPUs 0+1): %zu runs of KDA state, %zu/%zu tokens identical to one GPU\n",
              GetParam(), runs->size(), same, want.size());
  if (same < want.size()) {
    const std::vector<float>& r = ref_rows[same - 1];
    float scale = 0;
    for (float x : r) scale = std::max(scale, std::fabs(x));
    EXPECT_LE(r[want[same]] - r[got[same]], 1e-4 * scale) << "diverged at token " << same << " with a clear margin";
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TpHandover, ::testing::Values("tiny-k3", "tiny-kimi-linear"));

}  // namespace
}  // namespace pdserve::cuda
