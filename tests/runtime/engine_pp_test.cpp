// The engine over a pipeline-parallel group (three stages on the CPU backend): the same
// tokens as one stage, and a stage failing one request mid-flight ends that request with an
// error, frees its pages and slot, and lets the requests batched with it finish correctly.
#include <gtest/gtest.h>

#include <thread>

#include "model/test_models.h"
#include "pdserve/model/tp_group.h"
#include "pdserve/runtime/engine.h"

namespace pdserve::runtime {
namespace {

std::unique_ptr<Engine> pp_engine(int pp, TpModelGroup::StageFault fault = {}) {
  const std::string& dir = pdserve::testing::tiny_model_dir("tiny-k3");
  auto tok = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::load(dir).value());
  auto g = TpModelGroup::load_models(dir, 1, pp);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  RuntimeConfig cfg;
  cfg.page_size = 16;
  cfg.chunk_size = 16;
  cfg.max_running = 4;
  auto e = Engine::create(cfg, std::move(g).value(), tok);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (fault) (*e)->group().set_stage_fault(std::move(fault));
  (*e)->start();
  return std::move(e).value();
}

GenerateRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

void wait_all_free(const Engine& e) {
  for (int i = 0; i < 2000; ++i) {
    EngineStats s = e.stats();
    if (s.pages_used == 0 && s.slots_used == 0 && s.running == 0 && s.waiting == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EngineStats s = e.stats();
  EXPECT_EQ(s.pages_used, 0);
  EXPECT_EQ(s.slots_used, 0);
}

TEST(EnginePipeline, AStageFailingOneRequestEndsOnlyThatRequest) {
  const std::vector<std::vector<int32_t>> prompts = {pdserve::testing::random_ids(40, 1), pdserve::testing::random_ids(23, 2),
                                                     pdserve::testing::random_ids(31, 3)};
  const std::vector<int32_t> doomed = pdserve::testing::random_ids(35, 4);
  for (const auto& p : prompts) ASSERT_NE(p[16], doomed[16]);  // the fault below finds it by this token

  auto plain = pp_engine(1);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(plain->submit(greedy(p, 6)).value().wait().token_ids);

  // Three stages, no fault: the same tokens.
  auto e = pp_engine(3);
  std::vector<RequestHandle> hs;
  for (const auto& p : prompts) hs.push_back(e->submit(greedy(p, 6)).value());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(hs[i].wait().token_ids, want[i]) << "request " << i;
  wait_all_free(*e);

  // Stage 1 of 3 fails the doomed request's second prefill chunk (after stage 0 ran it),
  // batched with the others.
  auto f = pp_engine(3, [&](int stage, const SequenceInput& seq) {
    const bool is_doomed = seq.cached_len == 16 && seq.tokens.size() == 16 && seq.tokens[0] == doomed[16];
    return stage == 1 && is_doomed ? Status(ErrorCode::kUnavailable, "stage 1 lost the micro-batch") : Status::ok();
  });
  std::vector<RequestHandle> hf;
  hf.push_back(f->submit(greedy(doomed, 6)).value());
  for (const auto& p : prompts) hf.push_back(f->submit(greedy(p, 6)).value());
  RequestEvent bad = hf[0].wait();
  EXPECT_EQ(bad.finish_reason, FinishReason::kError);
  EXPECT_NE(bad.error.message().find("stage 1"), std::string::npos) << bad.error.message();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(hf[i + 1].wait().token_ids, want[i]) << "request " << i;
  wait_all_free(*f);
}

}  // namespace
}  // namespace pdserve::runtime
