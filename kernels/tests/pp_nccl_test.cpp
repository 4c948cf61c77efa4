// Pipeline parallelism over NCCL: two stages on two GPUs, activations passed GPU to GPU with
// ncclSend/ncclRecv (make_nccl_pipeline), must give the one-stage CPU forward's logits bit
// for bit (the channel moves bytes; every stage computes on the CPU backend as in pp_test).
// Also: a stage's failure crosses the NCCL channel and fails the micro-batch downstream.
// Skips itself, saying so, without two sm_90 GPUs or NCCL.
#include <thread>

#include "nccl/device_comm.h"
#include "pdserve/model/pipeline.h"
#include "pdserve/model/tp_group.h"
#include "test_models.h"
#include "test_util.h"

namespace pdserve {
namespace {

int hopper_count() {
  auto devs = cuda::list_devices();
  if (!devs.is_ok()) return 0;
  int n = 0;
  for (const auto& d : *devs) n += d.sm_major == 9 && d.sm_minor == 0;
  return n;
}

TEST(PipelineNccl, Pp2OverNcclEqualsPp1) {
  if (hopper_count() < 2) GTEST_SKIP() << "fewer than two sm_90 GPUs here: NCCL pipeline stages are compiled but not run";
  std::printf("%s\n", cuda::nccl_describe().c_str());
  const std::string dir = testing::tiny_model_dir("tiny-k3");
  auto one = TpModelGroup::load(dir, 1, 16, 16, 2, 1);
  auto two = TpModelGroup::load(dir, 1, 16, 16, 2, 2);
  ASSERT_TRUE(one.is_ok() && two.is_ok());
  auto chans = make_nccl_pipeline(2);
  ASSERT_TRUE(chans.is_ok()) << chans.status().message();
  ASSERT_TRUE((*two)->set_stage_channels(std::move(chans).value()).is_ok());
  std::vector<SequenceInput> seqs(2);
  const std::vector<std::vector<int32_t>> prompts = {testing::random_ids(70, 5), testing::random_ids(33, 6)};
  for (auto* g : {one->get(), two->get()}) {
    for (size_t s = 0; s < 2; ++s) {
      seqs[s].pages = *g->allocate_pages(5);
      seqs[s].state_slot = *g->allocate_slot();
    }
  }
  // Prefill both in one batch (two micro-batches), then 8 greedy decode steps.
  std::vector<std::vector<float>> logits(2);
  std::vector<int32_t> next(2, 0);
  for (int step = 0; step < 9; ++step) {
    ForwardBatch b;
    for (size_t s = 0; s < 2; ++s) {
      SequenceInput in = seqs[s];
      in.tokens = step == 0 ? prompts[s] : std::vector<int32_t>{next[s]};
      in.cached_len = step == 0 ? 0 : static_cast<int64_t>(prompts[s].size()) + step - 1;
      in.all_logits = step == 0;
      b.seqs.push_back(in);
    }
    ForwardOutput a, c;
    ASSERT_TRUE((*one)->forward(b, &a).is_ok());
    Status st = (*two)->forward(b, &c);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_EQ(a.logits, c.logits) << "step " << step;
    const int64_t vocab = a.vocab;
    for (size_t s = 0; s < 2; ++s) {
      const float* row = a.row(s);
      int32_t best = 0;
      for (int64_t v = 1; v < vocab; ++v)
        if (row[v] > row[best]) best = static_cast<int32_t>(v);
      next[s] = best;
    }
  }
}

TEST(PipelineNccl, AFailureCrossesTheChannel) {
  if (hopper_count() < 2) GTEST_SKIP() << "fewer than two sm_90 GPUs here: NCCL pipeline stages are compiled but not run";
  auto chans = make_nccl_pipeline(2);
  ASSERT_TRUE(chans.is_ok()) << chans.status().message();
  auto& p = *chans;
  Status got_fail, got_data;
  std::vector<float> recv(4);
  std::thread t([&] {
    got_fail = p[1]->recv(0, recv.data(), 4);
    got_data = p[1]->recv(0, recv.data(), 4);
  });
  const float data[4] = {1, 2, 3, 4};
  EXPECT_TRUE(p[0]->send_failure(1, Status(ErrorCode::kUnavailable, "lost")).is_ok());
  EXPECT_TRUE(p[0]->send(1, data, 4).is_ok());
  t.join();
  EXPECT_EQ(got_fail.code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(got_data.is_ok()) << got_data.message();
  EXPECT_EQ(recv, (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace pdserve
