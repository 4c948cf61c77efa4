// Parsers and generators: SSE splitting, chunk meaning, JSONL datasets, config rules,
// request bodies, SHA-256, arrival schedules.
#include <gtest/gtest.h>

#include <numeric>

#include "pdserve/bench/client.h"
#include "pdserve/bench/config.h"
#include "pdserve/bench/dataset.h"
#include "pdserve/bench/runner.h"
#include "pdserve/core/sha256.h"
#include "pdserve/bench/sse.h"

namespace pdserve::bench {
namespace {

std::vector<std::string> parse_sse(const std::string& stream, size_t piece) {
  std::vector<std::string> events;
  SseParser p([&](const std::string& d) { events.push_back(d); });
  for (size_t i = 0; i < stream.size(); i += piece) p.feed(stream.data() + i, std::min(piece, stream.size() - i));
  p.finish();
  return events;
}

TEST(SseParser, SameEventsWhateverTheSplit) {
  const std::string stream = ": keep-alive\n\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\ndata:[DONE]";
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    auto ev = parse_sse(stream, piece);
    ASSERT_EQ(ev.size(), 3u) << "piece " << piece;
    EXPECT_EQ(ev[0], "{\"a\":1}");
    EXPECT_EQ(ev[1], "line1\nline2");
    EXPECT_EQ(ev[2], "[DONE]");  // no closing blank line: still delivered at finish()
  }
}

TEST(Chunks, CompletionTokensAndClosingChunks) {
  auto c = interpret_chunk(R"({"choices":[{"text":"hi","finish_reason":null}]})", EndpointKind::kCompletions);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->text, "hi");
  EXPECT_TRUE(c->carries_token);
  // Empty text without finish_reason: a token whose bytes the detokenizer holds back.
  c = interpret_chunk(R"({"choices":[{"text":"","finish_reason":null}]})", EndpointKind::kCompletions);
  EXPECT_TRUE(c->carries_token);
  // Empty text with finish_reason: a closing chunk, not a token.
  c = interpret_chunk(R"({"choices":[{"text":"","finish_reason":"length"}]})", EndpointKind::kCompletions);
  EXPECT_FALSE(c->carries_token);
  EXPECT_TRUE(c->is_output);  // still output: a lone one-token answer with empty text looks like this
  EXPECT_EQ(c->finish_reason, "length");
  c = interpret_chunk(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}})", EndpointKind::kCompletions);
  EXPECT_FALSE(c->carries_token);
  ASSERT_TRUE(c->usage.has_value());
  EXPECT_EQ(c->usage->prompt_tokens, 7);
  EXPECT_EQ(c->usage->completion_tokens, 3);
}

TEST(Chunks, ChatRoleHeaderIsNotAToken) {
  auto c = interpret_chunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", EndpointKind::kChat);
  EXPECT_FALSE(c->carries_token);
  EXPECT_FALSE(c->is_output);
  c = interpret_chunk(R"({"choices":[{"delta":{"role":"assistant","content":"Hel"}}]})", EndpointKind::kChat);
  EXPECT_TRUE(c->carries_token);
  EXPECT_EQ(c->text, "Hel");
  c = interpret_chunk(R"({"choices":[{"delta":{"content":"lo"}}]})", EndpointKind::kChat);
  EXPECT_TRUE(c->carries_token);
}

TEST(Chunks, ErrorsAndGarbage) {
  auto c = interpret_chunk(R"({"error":{"message":"KV transfer failed"}})", EndpointKind::kCompletions);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->error, "KV transfer failed");
  EXPECT_FALSE(interpret_chunk("not json", EndpointKind::kCompletions).is_ok());
  auto r = interpret_response(R"({"choices":[{"message":{"content":"x"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1}})",
                              EndpointKind::kChat);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->text, "x");
  EXPECT_EQ(r->usage->completion_tokens, 1);
  EXPECT_FALSE(interpret_response(R"({"choices":[]})", EndpointKind::kCompletions).is_ok());
  EXPECT_FALSE(interpret_response(R"({"error":"boom"})", EndpointKind::kCompletions).is_ok());
}

TEST(Jsonl, AcceptsPromptIdsAndTurns) {
  const std::string text =
      "{\"prompt\": \"hello there\", \"category\": \"qa\"}\n"
      "\n"
      "{\"prompt_ids\": [1, 2, 3], \"output_len\": 4}\r\n"
      "{\"turns\": [\"first turn\", \"second\"], \"category\": \"coding\"}\n";
  auto p = parse_jsonl_prompts(text, "d.jsonl", 512);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].text, "hello there");
  EXPECT_EQ((*p)[0].category, "qa");
  EXPECT_EQ((*p)[0].output_len, 512);
  EXPECT_EQ((*p)[0].known_input_len(), -1);
  EXPECT_EQ((*p)[1].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ((*p)[1].output_len, 4);
  EXPECT_EQ((*p)[2].text, "first turn");
}

TEST(Jsonl, MalformedLinesNameTheLine) {
  struct Case {
    std::string text;
    std::string expect;
  };
  for (const auto& c : std::vector<Case>{
           {"{\"prompt\":\"a\"}\n\n{\"prompt\": \"b\"\n", "d.jsonl:3: not valid JSON"},
           {"[1,2]\n", "d.jsonl:1: expected a JSON object"},
           {"{\"prompt\":\"a\"}\n{\"text\":\"b\"}\n", "d.jsonl:2: needs one of"},
           {"{\"prompt_ids\":[1,-2]}\n", "d.jsonl:1: \"prompt_ids\" must hold non-negative integers"},
           {"{\"prompt\":\"\"}\n", "d.jsonl:1: \"prompt\" must be a non-empty string"},
           {"{\"prompt\":\"a\",\"output_len\":0}\n", "d.jsonl:1: \"output_len\" must be a positive integer"},
           {"\n  \n", "d.jsonl: no prompts"},
       }) {
    auto p = parse_jsonl_prompts(c.text, "d.jsonl", 8);
    ASSERT_FALSE(p.is_ok()) << c.text;
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos) << p.status().message();
  }
}

TEST(RandomIds, ExactLengthsAndDeterministic) {
  auto a = random_id_prompts(5, 64, 8, 1.0, 100, 42);
  auto b = random_id_prompts(5, 64, 8, 1.0, 100, 42);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ids.size(), 64u);
    EXPECT_EQ(a[i].output_len, 8);
    EXPECT_EQ(a[i].ids, b[i].ids);
    for (int64_t id : a[i].ids) EXPECT_TRUE(id >= 0 && id < 100);
  }
  EXPECT_NE(a[0].ids, a[1].ids);
  auto ranged = random_id_prompts(200, 100, 10, 0.5, 100, 1);
  for (const auto& p : ranged) {
    EXPECT_GE(p.ids.size(), 50u);
    EXPECT_LE(p.ids.size(), 100u);
    EXPECT_GE(p.output_len, 5);
    EXPECT_LE(p.output_len, 10);
  }
}

TEST(Config, ValidationNamesTheProblem) {
  BenchConfig c;
  c.out_dir = "/tmp/x";
  EXPECT_TRUE(c.validate().is_ok());
  auto bad = [&](auto mutate, const std::string& expect) {
    BenchConfig b = c;
    mutate(b);
    Status s = b.validate();
    EXPECT_FALSE(s.is_ok()) << expect;
    EXPECT_NE(s.message().find(expect), std::string::npos) << s.message();
  };
  bad([](BenchConfig& b) { b.num_prompts = 0; }, "--num-prompts must be at least 1");
  bad([](BenchConfig& b) { b.concurrency = 0; }, "--concurrency");
  bad([](BenchConfig& b) { b.endpoint = EndpointKind::kChat; }, "only --endpoint completions");
  bad([](BenchConfig& b) { b.dataset = DatasetKind::kJsonl; }, "needs --dataset-path");
  bad([](BenchConfig& b) { b.base_url = "localhost:1"; }, "must start with http://");
  bad([](BenchConfig& b) { b.out_dir.clear(); }, "--out");
  EXPECT_EQ(default_case_name(c), "1K -> 128, C1");
  BenchConfig d = c;
  d.input_len = 16384;
  d.output_len = 512;
  d.concurrency = 8;
  d.stream = false;
  EXPECT_EQ(default_case_name(d), "16K -> 512, C8, non-streaming");
  d.request_rate = 2.5;
  EXPECT_EQ(default_case_name(d), "16K -> 512, C8, 2.5 req/s, non-streaming");
  BenchConfig r;
  r.out_dir = "/r/run-7/";
  EXPECT_EQ(r.resolved().run_id, "run-7");
  EXPECT_EQ(c.to_json()["api_key"], "");
  d.api_key = "sk-secret";
  EXPECT_EQ(d.to_json()["api_key"], "<redacted>");
}

TEST(RequestBody, IdsIgnoreEosAndUsage) {
  BenchPrompt p;
  p.ids = {5, 6, 7};
  p.output_len = 9;
  auto body = build_request_body(p, EndpointKind::kCompletions, "m", true);
  ASSERT_TRUE(body.is_ok());
  Json j = Json::parse(*body);
  EXPECT_EQ(j["prompt"], Json::array({5, 6, 7}));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["model"], "m");
  EXPECT_FALSE(build_request_body(p, EndpointKind::kChat, "m", true).is_ok());
  p.ids.clear();
  p.text = "hi";
  j = Json::parse(*build_request_body(p, EndpointKind::kChat, "", false));
  EXPECT_EQ(j["messages"][0]["content"], "hi");
  EXPECT_FALSE(j.contains("model"));
  EXPECT_FALSE(j.contains("stream_options"));
}

TEST(BaseUrl, SplitsOriginAndPrefix) {
  auto b = parse_base_url("http://10.0.0.5:31000");
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->origin, "http://10.0.0.5:31000");
  EXPECT_EQ(b->prefix, "");
  b = parse_base_url("https://api.example.com/proxy/");
  EXPECT_EQ(b->origin, "https://api.example.com");
  EXPECT_EQ(b->prefix, "/proxy");
  EXPECT_FALSE(parse_base_url("10.0.0.5:31000").is_ok());
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;  // fed in odd pieces, across block boundaries
  const std::string million(1000000, 'a');
  for (size_t i = 0; i < million.size(); i += 997) h.update(million.data() + i, std::min<size_t>(997, million.size() - i));
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Arrivals, PoissonScheduleIsDeterministicWithTheRightMean) {
  EXPECT_EQ(poisson_arrivals(4, 0.0, 1), (std::vector<double>{0, 0, 0, 0}));
  auto a = poisson_arrivals(20001, 10.0, 3);
  EXPECT_EQ(a, poisson_arrivals(20001, 10.0, 3));
  EXPECT_EQ(a[0], 0.0);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_NEAR(a.back() / 20000.0, 0.1, 0.005);  // mean gap 1 / rate
}

}  // namespace
}  // namespace pdserve::bench
