// Pipeline parallelism on the CUDA backend (make_cuda_pp_forwards): each stage a CudaModel on
// its own GPU holding only its layers, activations GPU to GPU over NCCL send/recv.
//
// Tolerance: none. Stage s runs the same kernels in the same order on the same rows as one
// GPU running the whole model does for those layers, and the activations cross as bytes, so
// PP2 logits equal the one-GPU logits bit for bit when both see the same batches (the
// reference runs each micro-batch as its own forward: the split-KV MLA plan may depend on a
// step's row count). Against the one GPU running the whole batch at once the bound is the
// backend's 1e-4 normalised (tp_forward_test.cpp's), and measured values are printed.
// Skips itself, saying so, without two sm_90 GPUs (the refusals run everywhere).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "backend/cuda_model.h"
#include "common/device_info.h"
#include "pdserve/model/tp_group.h"
#include "test_models.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
using pdserve::testing::random_ids;
constexpr int64_t kPages = 48, kPageSize = 16, kSlots = 4;

int hopper_count() {
  auto devs = list_devices();
  if (!devs.is_ok()) return 0;
  int n = 0;
  for (const auto& d : *devs) n += d.sm_major == 9 && d.sm_minor == 0;
  return n;
}

CudaForwardOptions eager() {
  CudaForwardOptions o;
  o.graphs = false;  // the stages never capture graphs; the reference runs the same eager steps
  return o;
}

// The whole model on GPU 0.
std::unique_ptr<TpModelGroup> one_gpu(const std::string& preset) {
  auto g = TpModelGroup::load(pdserve::testing::tiny_model_dir(preset), 1, kPages, kPageSize, kSlots, 1);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  auto devs = make_cuda_tp_forwards({(*g)->model_ptr(0)}, kPages, kPageSize, kSlots, eager());
  EXPECT_TRUE(devs.is_ok()) << devs.status().message();
  EXPECT_TRUE((*g)->set_device_forwards(std::move(devs).value()).is_ok());
  return std::move(g).value();
}

// Two stages on GPUs 0 and 1.
std::unique_ptr<TpModelGroup> two_stages(const std::string& preset) {
  auto g = TpModelGroup::load(pdserve::testing::tiny_model_dir(preset), 1, kPages, kPageSize, kSlots, 2);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  auto devs = make_cuda_pp_forwards({(*g)->stage_model_ptr(0, 0), (*g)->stage_model_ptr(1, 0)}, kPages, kPageSize, kSlots);
  EXPECT_TRUE(devs.is_ok()) << devs.status().message();
  for (const auto& d : *devs) std::printf("%s\n", d->describe().c_str());
  Status st = (*g)->set_device_forwards(std::move(devs).value());
  EXPECT_TRUE(st.is_ok()) << st.message();
  return std::move(g).value();
}

// The same pages and slots on both sides (allocation is deterministic).
std::vector<SequenceInput> allocate(TpModelGroup& g, size_t n, int64_t pages) {
  std::vector<SequenceInput> seqs(n);
  for (auto& s : seqs) {
    s.pages = *g.allocate_pages(pages);
    s.state_slot = *g.allocate_slot();
  }
  return seqs;
}

// One GPU's logits for `batch`, either at once or one forward per sequence (the micro-batches
// of a pipeline whose micro-batch count equals the sequence count), laid out as one output.
std::vector<float> reference(TpModelGroup& g, const ForwardBatch& batch, bool per_sequence) {
  if (!per_sequence) {
    ForwardOutput o;
    EXPECT_TRUE(g.forward(batch, &o).is_ok());
    return o.logits;
  }
  std::vector<float> all;
  for (const SequenceInput& s : batch.seqs) {
    ForwardBatch one;
    one.seqs.push_back(s);
    ForwardOutput o;
    EXPECT_TRUE(g.forward(one, &o).is_ok());
    all.insert(all.end(), o.logits.begin(), o.logits.end());
  }
  return all;
}

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

class PipelineCuda : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (hopper_count() < 2) GTEST_SKIP() << "fewer than two sm_90 GPUs here: CUDA pipeline stages are compiled but not run";
  }
};

// Prefill of three prompts in one batch, then greedy decode steps: PP2 (one micro-batch, and
// one per sequence) equals one GPU bit for bit; the stages' caches gather into the one GPU's
// whole-model layout bit for bit at the hand-over.
TEST_P(PipelineCuda, Pp2OnTwoGpusEqualsOneGpuBitForBit) {
  const std::string preset = GetParam();
  for (int micro : {1, 3}) {
    auto ref = one_gpu(preset);
    auto pp = two_stages(preset);
    ASSERT_TRUE(ref && pp);
    pp->set_micro_batches(micro);
    const std::vector<std::vector<int32_t>> prompts = {random_ids(70, 5), random_ids(33, 6), random_ids(50, 7)};
    auto seqs = allocate(*ref, prompts.size(), 6);
    ASSERT_EQ(allocate(*pp, prompts.size(), 6)[2].pages, seqs[2].pages);
    const int64_t vocab = pp->config().vocab_size;
    std::vector<int32_t> next(prompts.size());
    double worst_whole = 0;
    for (int step = 0; step < 9; ++step) {
      ForwardBatch b;
      for (size_t s = 0; s < prompts.size(); ++s) {
        SequenceInput in = seqs[s];
        in.tokens = step == 0 ? prompts[s] : std::vector<int32_t>{next[s]};
        in.cached_len = step == 0 ? 0 : static_cast<int64_t>(prompts[s].size()) + step - 1;
        in.all_logits = step == 0;
        b.seqs.push_back(in);
      }
      ForwardOutput got;
      Status st = pp->forward(b, &got);
      ASSERT_TRUE(st.is_ok()) << st.message();
      for (size_t s = 0; s < prompts.size(); ++s) ASSERT_FALSE(got.seq_failed(s)) << got.seq_status[s].message();
      // The reference's own KV/state would advance twice if it ran both ways: the whole-batch
      // comparison runs on a second one-GPU model below, only at the prefill step.
      const std::vector<float> want = reference(*ref, b, micro > 1);
      ASSERT_EQ(got.logits, want) << preset << ", " << micro << " micro-batches, step " << step;
      if (step == 0 && micro > 1) {
        auto whole = one_gpu(preset);
        (void)allocate(*whole, prompts.size(), 6);
        worst_whole = nerr(got.logits, reference(*whole, b, false));
      }
      for (size_t s = 0; s < prompts.size(); ++s) next[s] = argmax(got.row(s), vocab);
    }
    if (micro > 1) {
      std::printf("%s: PP2 (a micro-batch per sequence) vs one GPU on the whole batch: normalised logit error %.3g\n", preset.c_str(),
                  worst_whole);
      EXPECT_LE(worst_whole, 1e-4);
    }
    // The hand-over gather: each stage's device pools -> the whole-model host pools.
    for (size_t s = 0; s < prompts.size(); ++s) {
      const CacheRegion region{seqs[s].pages, seqs[s].state_slot};
      ASSERT_TRUE(pp->cache_to_host(region).is_ok());
      ASSERT_TRUE(ref->cache_to_host(region).is_ok());
      const MlaKvPool& a = ref->kv(0);
      const MlaKvPool& b = pp->kv(0);
      for (int64_t l = 0; l < a.num_layers(); ++l) {
        for (int32_t p : region.pages) {
          ASSERT_EQ(std::memcmp(a.layer_base(l) + p * a.page_floats(), b.layer_base(l) + p * b.page_floats(), a.page_floats() * sizeof(float)), 0)
              << "MLA layer " << l << " page " << p;
        }
      }
      if (ref->state(0).slot_floats() > 0) {
        ASSERT_EQ(std::memcmp(ref->state(0).slot_base(region.slot), pp->state(0).slot_base(region.slot),
                              ref->state(0).slot_floats() * sizeof(float)), 0)
            << "sequence " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, PipelineCuda, ::testing::Values("tiny-k3", "tiny-k3-wide", "tiny-kimi-linear"));

class PipelineCudaFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    if (hopper_count() < 2) GTEST_SKIP() << "fewer than two sm_90 GPUs here: CUDA pipeline stages are compiled but not run";
  }
};

// The agreement over device stages: stage 0 drops the second request after running it (stage
// 1 ran it fine), so it fails everywhere (the union); the others are ready (the
// intersection), equal one GPU, and continue with their next chunk.
TEST_F(PipelineCudaFailures, AStageFailingOneRequestFailsItEverywhereAndOthersContinue) {
  auto ref = one_gpu("tiny-k3");
  auto pp = two_stages("tiny-k3");
  pp->set_micro_batches(3);
  const std::vector<std::vector<int32_t>> prompts = {random_ids(61, 31), random_ids(17, 32), random_ids(40, 33)};
  auto seqs = allocate(*ref, 3, 6);
  (void)allocate(*pp, 3, 6);
  ForwardBatch b;
  for (size_t s = 0; s < 3; ++s) {
    SequenceInput in = seqs[s];
    in.tokens.assign(prompts[s].begin(), prompts[s].begin() + std::min<size_t>(24, prompts[s].size()));
    in.all_logits = true;
    b.seqs.push_back(in);
  }
  const int32_t doomed = b.seqs[1].state_slot;
  pp->set_stage_fault([&](int stage, const SequenceInput& seq) {
    return stage == 0 && seq.state_slot == doomed ? Status(ErrorCode::kUnavailable, "stage 0 lost its activations") : Status::ok();
  });
  ForwardOutput fo;
  ASSERT_TRUE(pp->forward(b, &fo).is_ok());
  ASSERT_EQ(fo.seq_status.size(), 3u);
  EXPECT_TRUE(fo.seq_failed(1));
  EXPECT_EQ(fo.seq_status[1].code(), ErrorCode::kUnavailable);
  const std::vector<float> want = reference(*ref, b, true);
  const int64_t vocab = pp->config().vocab_size;
  for (size_t s : {size_t{0}, size_t{2}}) {
    ASSERT_FALSE(fo.seq_failed(s));
    const int64_t first = fo.first_row[s] * vocab, n = fo.num_rows[s] * vocab;
    EXPECT_TRUE(std::equal(fo.logits.begin() + first, fo.logits.begin() + first + n, want.begin() + first)) << "sequence " << s;
  }
  // The failed request's pages and slot go back once, on every stage.
  ASSERT_TRUE(pp->free_pages(b.seqs[1].pages).is_ok());
  ASSERT_TRUE(pp->free_slot(b.seqs[1].state_slot).is_ok());
  for (int s = 0; s < 2; ++s) EXPECT_EQ(pp->stage_state(s, 0).used_slots(), 2) << "stage " << s;
  pp->set_stage_fault({});
  ForwardBatch next;
  for (size_t s : {size_t{0}, size_t{2}}) {
    SequenceInput in = b.seqs[s];
    in.cached_len = 24;
    in.tokens.assign(prompts[s].begin() + 24, prompts[s].end());
    in.all_logits = false;
    next.seqs.push_back(in);
  }
  ForwardOutput fo2;
  ASSERT_TRUE(pp->forward(next, &fo2).is_ok());
  EXPECT_EQ(fo2.logits, reference(*ref, next, true));
}

// A stage's real failure crosses the NCCL link as its error code, a later stage that fails
// first still reads its input (so the earlier stage's send completes), and the link stays in
// step: the next good micro-batch equals one GPU.
TEST_F(PipelineCudaFailures, ALinkFailureCrossesAndTheLinkStaysInStep) {
  auto g = TpModelGroup::load(pdserve::testing::tiny_model_dir("tiny-k3"), 1, kPages, kPageSize, kSlots, 2);
  ASSERT_TRUE(g.is_ok());
  auto devs = make_cuda_pp_forwards({(*g)->stage_model_ptr(0, 0), (*g)->stage_model_ptr(1, 0)}, kPages, kPageSize, kSlots);
  ASSERT_TRUE(devs.is_ok()) << devs.status().message();
  auto& st = *devs;
  ForwardBatch good;
  SequenceInput in;
  in.tokens = random_ids(45, 9);
  in.pages = {0, 1, 2};
  in.state_slot = 0;
  in.all_logits = true;
  good.seqs.push_back(in);
  ForwardBatch bad_token = good, bad_page = good;
  bad_token.seqs[0].tokens[3] = static_cast<int32_t>((*g)->config().vocab_size);  // outside the vocabulary
  bad_page.seqs[0].pages[1] = static_cast<int32_t>(kPages);                       // no such page
  auto round = [&](const ForwardBatch& b0, const ForwardBatch& b1, Status* s0, Status* s1, ForwardOutput* o1) {
    ForwardOutput o0;
    std::thread t([&] { *s1 = st[1]->forward(b1, o1); });
    *s0 = st[0]->forward(b0, &o0);
    t.join();
  };
  Status s0, s1;
  ForwardOutput o1;
  round(bad_token, good, &s0, &s1, &o1);
  EXPECT_EQ(s0.code(), ErrorCode::kInvalidArgument) << s0.message();
  EXPECT_EQ(s1.code(), ErrorCode::kInvalidArgument) << s1.message();
  EXPECT_NE(s1.message().find("pipeline stage 0 failed"), std::string::npos) << s1.message();
  round(good, bad_page, &s0, &s1, &o1);
  EXPECT_TRUE(s0.is_ok()) << s0.message();
  EXPECT_EQ(s1.code(), ErrorCode::kInvalidArgument) << s1.message();
  EXPECT_NE(s1.message().find("page"), std::string::npos) << s1.message();
  round(good, good, &s0, &s1, &o1);
  ASSERT_TRUE(s0.is_ok() && s1.is_ok()) << s0.message() << " / " << s1.message();
  auto ref = one_gpu("tiny-k3");
  (void)allocate(*ref, 1, 3);
  EXPECT_EQ(o1.logits, reference(*ref, good, false));
}

// Everywhere: a pipeline without enough GPUs is refused naming the flag and both counts; a
// group refuses a device forward count that is not stages x ranks.
TEST(PipelineCudaRefusals, TooFewGpusAndWrongForwardCounts) {
  auto g = TpModelGroup::load(pdserve::testing::tiny_model_dir("tiny-k3"), 1, kPages, kPageSize, kSlots, 2);
  ASSERT_TRUE(g.is_ok());
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices < 2) {
    auto devs = make_cuda_pp_forwards({(*g)->stage_model_ptr(0, 0), (*g)->stage_model_ptr(1, 0)}, kPages, kPageSize, kSlots);
    ASSERT_FALSE(devs.is_ok());
    EXPECT_NE(devs.status().message().find("--pp 2"), std::string::npos) << devs.status().message();
  }
  auto swapped = make_cuda_pp_forwards({(*g)->stage_model_ptr(1, 0), (*g)->stage_model_ptr(0, 0)}, kPages, kPageSize, kSlots);
  EXPECT_FALSE(swapped.is_ok());
  std::vector<std::unique_ptr<DeviceForward>> none;
  EXPECT_EQ((*g)->set_device_forwards(std::move(none)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ((*g)->set_device_forward(nullptr).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve::cuda
