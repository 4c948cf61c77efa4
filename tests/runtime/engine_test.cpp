// The engine on the tiny K3 model: outputs against the model layer, batching invariance,
// aborts, admission errors and exact accounting.
#include "pdserve/runtime/engine.h"

#include <gtest/gtest.h>

#include <future>

#include "model/test_models.h"
#include "pdserve/runtime/sampling.h"

namespace pdserve::runtime {
namespace {

struct Loaded {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
};

const Loaded& tiny() {
  static Loaded l = [] {
    const std::string& dir = pdserve::testing::tiny_model_dir("tiny-k3");
    Loaded out;
    out.model = std::shared_ptr<const Model>(Model::load(dir).value().release());
    out.tok = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::load(dir).value());
    return out;
  }();
  return l;
}

std::unique_ptr<Engine> make_engine(RuntimeConfig cfg, bool start = true) {
  auto e = Engine::create(cfg, tiny().model, tiny().tok);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (start) (*e)->start();
  return std::move(e).value();
}

// Greedy continuation straight on the model layer: one sequence, one token at a time.
std::vector<int32_t> reference_greedy(const std::vector<int32_t>& prompt, int n) {
  const Model& m = *tiny().model;
  auto kv = MlaKvPool::for_model(m.config(), 64, 16);
  auto st = KdaStatePool::for_model(m.config(), 1);
  ModelCaches caches{kv.get(), st.get()};
  SequenceInput seq;
  seq.tokens = prompt;
  seq.pages = kv->allocate(kv->num_pages()).value();
  seq.state_slot = st->allocate().value();
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    ForwardOutput fo;
    EXPECT_TRUE(m.forward(ForwardBatch{{seq}}, caches, &fo).is_ok());
    const int32_t t = Sampler::argmax(std::span<const float>(fo.row(0), static_cast<size_t>(fo.vocab)));
    out.push_back(t);
    seq.cached_len += static_cast<int64_t>(seq.tokens.size());
    seq.tokens = {t};
  }
  return out;
}

GenerateRequest greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

std::vector<int32_t> prompt_of(int i, int len) {
  std::vector<int32_t> p;
  for (int k = 0; k < len; ++k) p.push_back((i * 131 + k * 17 + 5) % 1000);
  return p;
}

void expect_all_free(const Engine& e) {
  EngineStats s = e.stats();
  EXPECT_EQ(s.pages_used, 0);
  EXPECT_EQ(s.slots_used, 0);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
}

// Stats are updated by the engine thread after it posts the final event: poll a bounded
// number of times for the state we expect instead of sleeping for a fixed time.
void wait_all_free(const Engine& e) {
  for (int i = 0; i < 2000; ++i) {
    EngineStats s = e.stats();
    if (s.pages_used == 0 && s.slots_used == 0 && s.running == 0 && s.waiting == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  expect_all_free(e);
}

TEST(Engine, GreedyEqualsModelLayerArgmax) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  cfg.chunk_size = 7;  // several prefill chunks
  auto e = make_engine(cfg);
  const std::vector<int32_t> prompt = prompt_of(3, 30);
  auto h = e->submit(greedy_request(prompt, 12));
  ASSERT_TRUE(h.is_ok());
  RequestEvent all = h->wait();
  EXPECT_EQ(all.finish_reason, FinishReason::kLength);
  EXPECT_EQ(all.token_ids, reference_greedy(prompt, 12));
  EXPECT_EQ(all.prompt_tokens, 30);
  EXPECT_EQ(all.completion_tokens, 12);
  wait_all_free(*e);
}

TEST(Engine, ConcurrentRequestsMatchOneByOne) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  cfg.max_running = 8;  // 32 requests: queueing, mixed prefill + decode steps
  cfg.chunk_size = 16;
  cfg.step_token_budget = 40;
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 32; ++i) reqs.push_back(greedy_request(prompt_of(i, 5 + (i * 7) % 40), 4 + i % 9));

  auto serial = make_engine(cfg);
  std::vector<std::vector<int32_t>> one_by_one;
  for (const auto& r : reqs) one_by_one.push_back(serial->submit(r).value().wait().token_ids);

  auto e = make_engine(cfg);
  std::vector<RequestHandle> handles;
  for (const auto& r : reqs) handles.push_back(e->submit(r).value());
  for (size_t i = 0; i < reqs.size(); ++i) {
    RequestEvent all = handles[i].wait();
    EXPECT_EQ(all.token_ids, one_by_one[i]) << "request " << i;
    EXPECT_EQ(static_cast<int64_t>(all.token_ids.size()), reqs[i].sampling.max_tokens);
  }
  // And the first one against the model layer, so "same" also means "right".
  EXPECT_EQ(one_by_one[0], reference_greedy(reqs[0].prompt, static_cast<int>(reqs[0].sampling.max_tokens)));
  wait_all_free(*e);
  EXPECT_GT(e->stats().steps, 0);
}

TEST(Engine, AbortFreesPagesAndSlot) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  auto e = make_engine(cfg);
  {
    auto h = e->submit(greedy_request(prompt_of(1, 10), 4000));
    ASSERT_TRUE(h.is_ok());
    std::optional<RequestEvent> ev;
    while (!(ev = h->next())) {
    }
    EXPECT_FALSE(ev->finished);
    EXPECT_GT(e->stats().pages_used, 0);
    EXPECT_EQ(e->stats().slots_used, 1);
  }  // handle dropped: the request is aborted
  wait_all_free(*e);
  EXPECT_EQ(e->metrics().requests_abort, 1u);
  EXPECT_LT(e->metrics().generation_tokens, 4000u);
}

TEST(Engine, StopStringEndsTheOutputBeforeIt) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  auto e = make_engine(cfg);
  GenerateRequest r = greedy_request(prompt_of(4, 12), 24);
  RequestEvent full = e->submit(r).value().wait();
  ASSERT_GE(full.text.size(), 6u);
  // A stop string that starts in the middle of the text (and very likely spans tokens).
  const size_t at = full.text.size() / 2;
  r.sampling.stop = {full.text.substr(at, 3)};
  const size_t first = full.text.find(r.sampling.stop[0]);
  RequestEvent cut = e->submit(r).value().wait();
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  EXPECT_EQ(cut.text, full.text.substr(0, first));
  wait_all_free(*e);
}

TEST(Engine, StopTokenAndEosHandling) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  auto e = make_engine(cfg);
  GenerateRequest r = greedy_request(prompt_of(5, 8), 10);
  RequestEvent full = e->submit(r).value().wait();
  ASSERT_EQ(full.token_ids.size(), 10u);
  // The 4th generated token as a stop id: 4 tokens counted, its text not in the output.
  r.sampling.stop_token_ids = {full.token_ids[3]};
  RequestEvent cut = e->submit(r).value().wait();
  size_t first = 0;
  while (full.token_ids[first] != full.token_ids[3]) ++first;
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  EXPECT_EQ(cut.token_ids.size(), first + 1);
  // As an EOS id it is ignored with ignore_eos.
  r.sampling.stop_token_ids.clear();
  r.eos_token_ids = {full.token_ids[3]};
  EXPECT_EQ(e->submit(r).value().wait().token_ids.size(), 10u);
  r.sampling.ignore_eos = false;
  EXPECT_EQ(e->submit(r).value().wait().token_ids.size(), first + 1);
  wait_all_free(*e);
}

TEST(Engine, SeededSamplingIsReproducible) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  auto e = make_engine(cfg);
  GenerateRequest r = greedy_request(prompt_of(6, 8), 16);
  r.sampling.temperature = 1.0;
  r.sampling.seed = 1234;
  auto a = e->submit(r).value().wait().token_ids;
  auto b = e->submit(r).value().wait().token_ids;
  EXPECT_EQ(a, b);
  r.sampling.seed = 4321;
  EXPECT_NE(a, e->submit(r).value().wait().token_ids);
}

TEST(Engine, LogprobsComeWithEveryToken) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  auto e = make_engine(cfg);
  GenerateRequest r = greedy_request(prompt_of(7, 8), 5);
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 3;
  RequestEvent all = e->submit(r).value().wait();
  ASSERT_EQ(all.logprobs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(all.logprobs[i].id, all.token_ids[i]);
    ASSERT_EQ(all.logprobs[i].top.size(), 3u);
    EXPECT_EQ(all.logprobs[i].top[0].id, all.token_ids[i]);  // greedy: the best is the pick
    EXPECT_LE(all.logprobs[i].logprob, 0.0f);
  }
}

TEST(Engine, RefusesWhatCanNeverFitAndBoundsTheQueue) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  cfg.max_running = 1;
  cfg.max_queue = 1;
  cfg.max_model_len = 100;
  cfg.num_pages = 4;  // 64 tokens
  auto e = make_engine(cfg, /*start=*/false);  // nothing runs: the bound is exact
  auto too_long = e->submit(greedy_request(prompt_of(1, 90), 20));
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_EQ(too_long.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("context limit"), std::string::npos);
  auto too_big = e->submit(greedy_request(prompt_of(1, 60), 20));  // fits 100, not 64 tokens of pages
  ASSERT_FALSE(too_big.is_ok());
  EXPECT_EQ(too_big.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e->submit(greedy_request({}, 1)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e->submit(greedy_request({5000000}, 1)).status().code(), ErrorCode::kInvalidArgument);
  auto a = e->submit(greedy_request(prompt_of(1, 4), 4));
  auto b = e->submit(greedy_request(prompt_of(2, 4), 4));
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE(b.is_ok());
  auto c = e->submit(greedy_request(prompt_of(3, 4), 4));
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(e->metrics().requests_rejected, 3u);
  e->start();
  EXPECT_EQ(a->wait().token_ids.size(), 4u);
  EXPECT_EQ(b->wait().token_ids.size(), 4u);
  EXPECT_TRUE(e->submit(greedy_request(prompt_of(3, 4), 4)).is_ok());  // room again
  wait_all_free(*e);
}

TEST(Engine, StopAbortsEverythingAndFreesIt) {
  RuntimeConfig cfg;
  cfg.page_size = 16;
  cfg.max_running = 2;
  auto e = make_engine(cfg);
  std::vector<RequestHandle> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(e->submit(greedy_request(prompt_of(i, 10), 3000)).value());
  e->stop();
  for (auto& h : hs) EXPECT_EQ(h.wait().finish_reason, FinishReason::kAbort);
  expect_all_free(*e);
}

}  // namespace
}  // namespace pdserve::runtime
