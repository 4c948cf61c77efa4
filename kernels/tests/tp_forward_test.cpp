// Tensor parallelism on the GPU: the NCCL communicator's collectives against host sums, and
// the TP2 device forward (two ranks on two GPUs) against the TP1 device forward and the CPU
// TP2 group, on the same batches.
//
// Bound: normalised error max|a - b| / max|b| <= 1e-4 on logits, as forward_test.cpp (all
// sides fp32; TP2 adds the two ranks' partial sums where TP1 sums in one dot product).
// Greedy: 32 tokens, each side following its own choice, must be identical unless the
// reference's margin between the two choices is within that bound.
// Skips itself, saying so, without two sm_90 GPUs (the refusal test runs everywhere).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "backend/cuda_model.h"
#include "nccl/device_comm.h"
#include "pdserve/model/tp_group.h"
#include "test_models.h"
#include "test_util.h"

namespace pdserve::cuda {
namespace {

using namespace ktest;
constexpr double kBound = 1e-4;

int hopper_count() {
  auto devs = list_devices();
  if (!devs.is_ok()) return 0;
  int n = 0;
  for (const auto& d : *devs) n += d.sm_major == 9 && d.sm_minor == 0;
  return n;
}

class TwoGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (hopper_count() < 2) GTEST_SKIP() << "fewer than two sm_90 GPUs here: GPU tensor parallelism is compiled but not run";
  }
};

TEST_F(TwoGpuTest, NcclAllReduceAndAllGatherMatchHostSums) {
  std::printf("%s\n", nccl_describe().c_str());
  auto comms = make_nccl_group(2);
  ASSERT_TRUE(comms.is_ok()) << comms.status().message();
  const int64_t n = 7168 * 3 + 5;  // not a multiple of anything NCCL likes
  std::vector<std::vector<float>> in(2), reduced(2), gathered(2);
  for (int r = 0; r < 2; ++r) in[r] = randn(n, 100 + r);
  std::vector<Status> st(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      DeviceCommunicator& c = *(*comms)[r];
      if (cudaSetDevice(r) != cudaSuccess) return void(st[r] = internal_error("cudaSetDevice"));
      cudaStream_t s;
      cudaStreamCreate(&s);
      DeviceBuffer<float> a(n), g(2 * n);
      st[r] = a.upload(in[r]);
      if (st[r].is_ok()) st[r] = c.all_gather(a.get(), n, g.get(), s);
      if (st[r].is_ok()) st[r] = c.all_reduce_sum(a.get(), n, s);
      cudaStreamSynchronize(s);
      reduced[r] = a.download().value();
      gathered[r] = g.download().value();
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  for (const Status& s : st) ASSERT_TRUE(s.is_ok()) << s.message();
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = in[0][i] + in[1][i];
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reduced[r], want) << "rank " << r;  // a sum of two is exact in any order
    EXPECT_TRUE(std::equal(in[0].begin(), in[0].end(), gathered[r].begin())) << "rank " << r;
    EXPECT_TRUE(std::equal(in[1].begin(), in[1].end(), gathered[r].begin() + n)) << "rank " << r;
  }
}

// Three groups over the same tiny model and pool geometry: CPU TP2, GPU TP1, GPU TP2. Page
// and slot allocation is deterministic, so one batch description drives all three.
struct Trio {
  std::unique_ptr<TpModelGroup> cpu2, gpu1, gpu2;
  explicit Trio(const std::string& preset) {
    const std::string dir = testing::tiny_model_dir(preset);
    const int64_t pages = 64, ps = 16, slots = 4;
    cpu2 = TpModelGroup::load(dir, 2, pages, ps, slots).value();
    gpu1 = TpModelGroup::load(dir, 1, pages, ps, slots).value();
    gpu2 = TpModelGroup::load(dir, 2, pages, ps, slots).value();
    auto d1 = make_cuda_tp_forwards({gpu1->model_ptr(0)}, pages, ps, slots);
    EXPECT_TRUE(d1.is_ok()) << d1.status().message();
    auto d2 = make_cuda_tp_forwards({gpu2->model_ptr(0), gpu2->model_ptr(1)}, pages, ps, slots);
    EXPECT_TRUE(d2.is_ok()) << d2.status().message();
    if (!d1.is_ok() || !d2.is_ok()) return;
    EXPECT_TRUE(gpu1->set_device_forwards(std::move(d1).value()).is_ok());
    EXPECT_TRUE(gpu2->set_device_forwards(std::move(d2).value()).is_ok());
    std::printf("%s\n", gpu2->device_forward()->describe().c_str());
  }
  bool ready() const { return gpu1->device_forward() && gpu2->device_forward(); }
  SequenceInput sequence(int64_t tokens) {
    SequenceInput s;
    const int64_t n = (tokens + 15) / 16;
    s.pages = cpu2->allocate_pages(n).value();
    EXPECT_EQ(gpu1->allocate_pages(n).value(), s.pages);
    EXPECT_EQ(gpu2->allocate_pages(n).value(), s.pages);
    s.state_slot = cpu2->allocate_slot().value();
    EXPECT_EQ(gpu1->allocate_slot().value(), s.state_slot);
    EXPECT_EQ(gpu2->allocate_slot().value(), s.state_slot);
    return s;
  }
};

int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t v = 1; v < n; ++v)
    if (row[v] > row[best]) best = static_cast<int32_t>(v);
  return best;
}

class CudaTp2 : public TwoGpuTest, public ::testing::WithParamInterface<const char*> {};

// A (45 tokens) prefilled in chunks of 16, 16, 13 mixed with B (20) and C (7) in one chunk
// each, then 12 decode steps of all three; every side follows the CPU's token choice.
TEST_P(CudaTp2, MixedBatchesMatchTp1GpuAndCpuTp2) {
  Trio t(GetParam());
  ASSERT_TRUE(t.ready());
  const int64_t V = t.cpu2->config().vocab_size;
  const auto a = testing::random_ids(45, 11), b = testing::random_ids(20, 12), c = testing::random_ids(7, 13);
  SequenceInput A = t.sequence(45 + 16), B = t.sequence(20 + 16), C = t.sequence(7 + 16);
  double vs_gpu1 = 0, vs_cpu2 = 0;
  auto run = [&](std::vector<SequenceInput*> seqs) {
    ForwardBatch batch;
    for (auto* s : seqs) batch.seqs.push_back(*s);
    ForwardOutput oc, o1, o2;
    Status s0 = t.cpu2->forward(batch, &oc), s1 = t.gpu1->forward(batch, &o1), s2 = t.gpu2->forward(batch, &o2);
    ASSERT_TRUE(s0.is_ok() && s1.is_ok() && s2.is_ok()) << s0.message() << s1.message() << s2.message();
    ASSERT_EQ(o2.logits.size(), oc.logits.size());
    EXPECT_EQ(o2.first_row, oc.first_row);
    vs_gpu1 = std::max(vs_gpu1, nerr(o2.logits, o1.logits));
    vs_cpu2 = std::max(vs_cpu2, nerr(o2.logits, oc.logits));
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i]->cached_len += static_cast<int64_t>(seqs[i]->tokens.size());
      seqs[i]->tokens = {argmax(oc.row(i), V)};
      seqs[i]->all_logits = false;
    }
  };
  auto chunk = [](const std::vector<int32_t>& v, size_t b, size_t e) { return std::vector<int32_t>(v.begin() + b, v.begin() + e); };
  A.tokens = chunk(a, 0, 16);
  A.all_logits = true;
  B.tokens = b;
  B.all_logits = true;
  run({&A, &B});
  A.tokens = chunk(a, 16, 32);
  A.all_logits = true;
  C.tokens = c;
  run({&C, &A});
  A.tokens = chunk(a, 32, 45);
  A.all_logits = true;
  run({&A, &B, &C});
  for (int i = 0; i < 12; ++i) run({&B, &C, &A});
  std::printf("%s: TP2 GPU logits error vs TP1 GPU %.3g, vs CPU TP2 %.3g\n", GetParam(), vs_gpu1, vs_cpu2);
  EXPECT_LT(vs_gpu1, kBound);
  EXPECT_LT(vs_cpu2, kBound);
}

TEST_P(CudaTp2, Greedy32TokensIdenticalToTp1Gpu) {
  Trio t(GetParam());
  ASSERT_TRUE(t.ready());
  const int64_t V = t.cpu2->config().vocab_size;
  SequenceInput s1 = t.sequence(20 + 32);
  s1.tokens = testing::random_ids(20, 21);
  SequenceInput s2 = s1;
  int same = 0;
  for (int i = 0; i < 32; ++i) {
    ForwardOutput o1, o2;
    ASSERT_TRUE(t.gpu1->forward(ForwardBatch{{s1}}, &o1).is_ok());
    ASSERT_TRUE(t.gpu2->forward(ForwardBatch{{s2}}, &o2).is_ok());
    const int32_t k1 = argmax(o1.row(0), V), k2 = argmax(o2.row(0), V);
    if (k1 != k2) {
      const float* r = o1.row(0);
      float scale = 0;
      for (int64_t v = 0; v < V; ++v) scale = std::max(scale, std::fabs(r[v]));
      const double margin = r[k1] - r[k2];
      std::printf("%s: TP2 greedy diverged at step %d, TP1 margin %.3g (scale %.3g)\n", GetParam(), i, margin, scale);
      EXPECT_LE(margin, kBound * scale) << "diverged at step " << i << " with a clear TP1 margin";
      break;
    }
    ++same;
    s1.cached_len += static_cast<int64_t>(s1.tokens.size());
    s2.cached_len = s1.cached_len;
    s1.tokens = s2.tokens = {k1};
  }
  std::printf("%s: TP2 vs TP1 greedy %d/32 identical\n", GetParam(), same);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaTp2, ::testing::Values("tiny-k3", "tiny-kimi-linear", "tiny-k3-wide"));

// Runs everywhere: asking for more ranks than GPUs is refused before anything is loaded.
TEST(CudaTpNoGpu, MoreRanksThanGpusIsRefusedSayingSo) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  std::vector<std::shared_ptr<const Model>> shards(devices + 1);
  auto r = make_cuda_tp_forwards(shards, 4, 16, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  const std::string want = "needs " + std::to_string(devices + 1) + " GPUs";
  EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace pdserve::cuda
