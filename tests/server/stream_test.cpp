// The OpenAI surface end to end over HTTP: response shapes, SSE chunks, usage, stop strings,
// disconnects, overload and the info endpoints.
#include <gtest/gtest.h>

#include "server_fixture.h"

namespace pdserve::server::testing {
namespace {

// Bytes [at, at + n) widened to whole UTF-8 characters (a stop string must be valid text).
std::string whole_chars(const std::string& s, size_t at, size_t n) {
  auto cont = [&](size_t i) { return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  while (cont(at)) ++at;
  size_t end = std::min(s.size(), at + n);
  while (cont(end)) ++end;
  return s.substr(at, end - at);
}

Json post_json(const LiveServer& s, const std::string& path, const Json& body) {
  auto [st, text] = s.post(path, body.dump());
  EXPECT_EQ(st, 200) << text;
  return Json::parse(text);
}

std::vector<Json> post_stream(const LiveServer& s, const std::string& path, const Json& body) {
  auto [st, text] = s.post(path, body.dump());
  EXPECT_EQ(st, 200) << text;
  auto events = sse_events(text);
  EXPECT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<Json> out;
  for (size_t i = 0; i + 1 < events.size(); ++i) out.push_back(Json::parse(events[i]));
  return out;
}

// Keeps polling /get_server_info until nothing is held (the engine frees at its next step).
bool wait_pools_free(const LiveServer& s) {
  for (int i = 0; i < 2000; ++i) {
    Json p = s.info()["pools"];
    if (p["kv_pages_used"] == 0 && p["kda_slots_used"] == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(ServerApi, CompletionShapeUsageAndTokenPrompt) {
  LiveServer s;
  Json r = post_json(s, "/v1/completions",
                     {{"prompt", {11, 22, 33, 44}}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "tiny-k3");
  EXPECT_TRUE(r["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(r["usage"]["completion_tokens"], 6);
  EXPECT_EQ(r["usage"]["total_tokens"], 10);
  // The text is the detokenised greedy continuation the engine produces.
  auto h = s.server().engine().submit([] {
    runtime::GenerateRequest g;
    g.prompt = {11, 22, 33, 44};
    g.sampling.temperature = 0;
    g.sampling.max_tokens = 6;
    g.sampling.ignore_eos = true;
    return g;
  }());
  EXPECT_EQ(r["choices"][0]["text"], h->wait().text);
}

TEST(ServerApi, StreamingChunksMatchTheNonStreamingText) {
  LiveServer s;
  Json req = {{"prompt", "The quick brown fox"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  Json whole = post_json(s, "/v1/completions", req);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  auto chunks = post_stream(s, "/v1/completions", req);
  ASSERT_GE(chunks.size(), 2u);
  std::string text;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i]["object"], "text_completion");
    EXPECT_EQ(chunks[i]["id"], chunks[0]["id"]);
    EXPECT_TRUE(chunks[i]["usage"].is_null());
    text += chunks[i]["choices"][0]["text"].get<std::string>();
    const bool last = i + 2 == chunks.size();
    EXPECT_EQ(chunks[i]["choices"][0]["finish_reason"].is_null(), !last);
  }
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  const Json& usage_chunk = chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"], whole["usage"]);
}

TEST(ServerApi, ChatReturnsReasoningAndContentAndStreamsTheSame) {
  LiveServer s;
  Json req = {{"messages", {{{"role", "user"}, {"content", "Say hi"}}}},
              {"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}};
  Json whole = post_json(s, "/v1/chat/completions", req);
  EXPECT_EQ(whole["object"], "chat.completion");
  const Json& msg = whole["choices"][0]["message"];
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_TRUE(msg["content"].is_string());
  EXPECT_TRUE(msg["reasoning_content"].is_string());  // thinking mode opens the think channel
  EXPECT_EQ(whole["usage"]["completion_tokens"], 20);

  req["stream"] = true;
  auto chunks = post_stream(s, "/v1/chat/completions", req);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content;
  for (const Json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, msg["reasoning_content"]);
  EXPECT_EQ(content, msg["content"]);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");

  // Without thinking the prompt opens the response channel: no reasoning_content.
  req.erase("stream");
  req["chat_template_kwargs"] = {{"thinking", false}};
  Json plain = post_json(s, "/v1/chat/completions", req);
  EXPECT_FALSE(plain["choices"][0]["message"].contains("reasoning_content"));
}

TEST(ServerApi, StopStringIsNeverLeakedInStreamOrNot) {
  LiveServer s;
  Json req = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string full = post_json(s, "/v1/completions", req)["choices"][0]["text"];
  ASSERT_GE(full.size(), 8u);
  const std::string stop = whole_chars(full, full.size() / 2, 3);
  const std::string expect = full.substr(0, full.find(stop));
  req["stop"] = {stop};
  Json cut = post_json(s, "/v1/completions", req);
  EXPECT_EQ(cut["choices"][0]["text"], expect);
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  req["stream"] = true;
  std::string streamed;
  for (const Json& c : post_stream(s, "/v1/completions", req)) streamed += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, expect);
}

TEST(ServerApi, LogprobsInBothApis) {
  LiveServer s;
  Json c = post_json(s, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 4}, {"temperature", 0},
                                             {"ignore_eos", true}, {"logprobs", 2}});
  const Json& lp = c["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  EXPECT_LE(lp["token_logprobs"][0].get<double>(), 0.0);
  EXPECT_LE(lp["top_logprobs"][0].size(), 2u);
  Json ch = post_json(s, "/v1/chat/completions",
                      {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 3}, {"temperature", 0},
                       {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 3}});
  const Json& content = ch["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_EQ(content[0]["top_logprobs"][0]["logprob"], content[0]["logprob"]);  // greedy picks the best
}

// A raw client that reads the first SSE event and then vanishes.
TEST(ServerApi, DisconnectMidStreamFreesPagesAndSlot) {
  LiveServer s;
  const double aborted_before = s.metric("pdserve_request_finished_total{reason=\"abort\"}");
  const std::string body = R"({"prompt": "Tell me a long story", "max_tokens": 1000, "ignore_eos": true, "stream": true})";
  RawStream client;
  ASSERT_TRUE(client.open(s.port(), "/v1/completions", body)) << client.received();
  // Mid-stream: the request holds its reservation right now.
  Json pools = s.info()["pools"];
  EXPECT_GT(pools["kv_pages_used"].get<int>(), 0);
  EXPECT_EQ(pools["kda_slots_used"], 1);
  client.close();
  EXPECT_TRUE(wait_pools_free(s));
  EXPECT_EQ(s.metric("pdserve_request_finished_total{reason=\"abort\"}"), aborted_before + 1);
  EXPECT_LT(s.metric("pdserve_generation_tokens_total"), 1000);
  EXPECT_EQ(s.metric("pdserve_num_requests_running"), 0);
  // And the server still serves.
  EXPECT_EQ(s.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})").first, 200);
}

// A non-streaming client that hangs up before its answer: the handler sees the hang-up on
// the socket (httplib 0.11.4 cannot tell it) and aborts, instead of decoding to max_tokens.
TEST(ServerApi, NonStreamingClientHangingUpAbortsTheRequest) {
  LiveServer s;
  const double aborted_before = s.metric("pdserve_request_finished_total{reason=\"abort\"}");
  RawStream client;
  ASSERT_TRUE(client.send_only(s.port(), "/v1/completions", R"({"prompt": "Tell me a long story", "max_tokens": 1000, "ignore_eos": true})"));
  bool admitted = false;
  for (int i = 0; i < 2000 && !admitted; ++i) {
    admitted = s.info()["pools"]["kda_slots_used"] == 1;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(admitted);
  client.close();
  EXPECT_TRUE(wait_pools_free(s));
  EXPECT_EQ(s.metric("pdserve_request_finished_total{reason=\"abort\"}"), aborted_before + 1);
  EXPECT_LT(s.metric("pdserve_generation_tokens_total"), 1000);
  EXPECT_EQ(s.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})").first, 200);
}

TEST(ServerApi, OverloadGets503NotAnUnboundedQueue) {
  ServeConfig cfg = tiny_config();
  cfg.runtime.max_running = 1;
  cfg.runtime.max_queue = 0;
  LiveServer s(cfg);
  // Occupy the only place with a streaming request and hold it open.
  RawStream holder;
  ASSERT_TRUE(holder.open(s.port(), "/v1/completions",
                          R"({"prompt": "hold", "max_tokens": 1000, "ignore_eos": true, "stream": true})"));
  auto [st, body] = s.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
  EXPECT_EQ(st, 503) << body;
  Json e = Json::parse(body)["error"];
  EXPECT_EQ(e["type"], "overloaded_error");
  EXPECT_GE(s.metric("pdserve_request_rejected_total"), 1);
  holder.close();
  EXPECT_TRUE(wait_pools_free(s));
  // Room again once the holder is gone.
  for (int i = 0; i < 2000 && s.metric("pdserve_num_requests_running") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(s.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})").first, 200);
}

TEST(ServerApi, ThirtyTwoConcurrentRequestsMatchOneByOne) {
  ServeConfig cfg = tiny_config();
  cfg.runtime.max_running = 8;  // the rest queue; steps mix prefill chunks and decodes
  cfg.runtime.chunk_size = 16;
  LiveServer s(cfg);
  auto body = [](int i) {
    std::vector<int> ids;
    for (int k = 0; k < 5 + (i * 7) % 40; ++k) ids.push_back((i * 131 + k * 17 + 5) % 1000);
    return Json{{"prompt", ids}, {"max_tokens", 4 + i % 9}, {"temperature", 0}, {"ignore_eos", true}}.dump();
  };
  std::vector<std::string> serial(32), parallel(32);
  for (int i = 0; i < 32; ++i) serial[i] = Json::parse(s.post("/v1/completions", body(i)).second)["choices"][0]["text"];
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i)
    threads.emplace_back([&, i] {
      auto [st, text] = s.post("/v1/completions", body(i));
      parallel[i] = st == 200 ? Json::parse(text)["choices"][0]["text"].get<std::string>() : "HTTP " + std::to_string(st);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(parallel[i], serial[i]) << "request " << i;
  EXPECT_TRUE(wait_pools_free(s));
}

TEST(ServerApi, InfoEndpoints) {
  LiveServer s;
  Json models = Json::parse(s.get("/v1/models").second);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny-k3");
  EXPECT_EQ(s.get("/health").first, 200);
  auto [st, hg] = s.get("/health_generate");
  EXPECT_EQ(st, 200) << hg;
  EXPECT_EQ(Json::parse(hg)["token_ids"].size(), 1u);
  Json info = s.info();
  EXPECT_EQ(info["runtime"]["page_size"], 16);
  EXPECT_EQ(info["runtime"]["max_model_len"], 1024);
  EXPECT_EQ(info["pools"]["kv_pages_total"], 16 * 64);  // auto: max_running x 1024 / 16
  EXPECT_EQ(info["pools"]["kda_slots_total"], 16);
  EXPECT_EQ(info["parallelism"]["tp"], 1);
  EXPECT_EQ(info["api_key"], "");
  const double gen_before = s.metric("pdserve_generation_tokens_total");
  const double prompt_before = s.metric("pdserve_prompt_tokens_total");
  ASSERT_EQ(s.post("/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": true})").first, 200);
  EXPECT_EQ(s.metric("pdserve_generation_tokens_total"), gen_before + 5);
  EXPECT_EQ(s.metric("pdserve_prompt_tokens_total"), prompt_before + 3);
  EXPECT_GE(s.metric("pdserve_time_to_first_token_seconds_count"), 1);
  EXPECT_GE(s.metric("pdserve_inter_token_latency_seconds_count"), 4);
  EXPECT_GE(s.metric("pdserve_e2e_request_latency_seconds_count"), 1);
  EXPECT_EQ(s.metric("pdserve_kv_pages_total"), 16 * 64);
  EXPECT_EQ(s.metric("pdserve_kv_pages_used"), 0);
  EXPECT_EQ(s.metric("pdserve_kda_slots_used"), 0);
  EXPECT_EQ(s.metric("pdserve_num_requests_waiting"), 0);
}

}  // namespace
}  // namespace pdserve::server::testing
