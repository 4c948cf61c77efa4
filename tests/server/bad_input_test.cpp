// Every bad input gets its 4xx with an OpenAI-style error object, and the server keeps
// serving: each case is followed by a normal request that must succeed.
#include <gtest/gtest.h>

#include "server_fixture.h"

namespace pdserve::server::testing {
namespace {

struct BadCase {
  const char* name;
  const char* path;
  std::string body;
  int status;
  const char* param;  // expected error.param ("" for null)
};

void expect_error_body(const std::string& body, int status, const std::string& param, const std::string& name) {
  Json j = Json::parse(body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << name << ": " << body;
  ASSERT_TRUE(j.contains("error")) << name << ": " << body;
  const Json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << name;
  EXPECT_TRUE(e["type"].is_string()) << name;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << name;
  if (status == 400 || status == 413) {
    EXPECT_EQ(e["type"], "invalid_request_error") << name;
  }
  if (param.empty()) EXPECT_TRUE(e["param"].is_null()) << name << ": " << body;
  else EXPECT_EQ(e["param"], param) << name << ": " << body;
}

void expect_still_serving(const LiveServer& s, const std::string& after) {
  auto [st, body] = s.post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 3, "temperature": 0})");
  ASSERT_EQ(st, 200) << "after " << after << ": " << body;
  Json j = Json::parse(body);
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>() <= 3, true);
  EXPECT_EQ(j["object"], "text_completion");
}

TEST(ServerBadInput, EachCaseGetsItsErrorAndTheServerKeepsServing) {
  LiveServer s;
  const std::string long_prompt = "[" + [] {
    std::string ids;
    for (int i = 0; i < 1100; ++i) ids += (i ? "," : "") + std::to_string(10 + i % 500);
    return ids;
  }() + "]";
  const std::vector<BadCase> cases = {
      {"malformed json", "/v1/completions", R"({"prompt": "hi", )", 400, "body"},
      {"not an object", "/v1/completions", R"(["prompt"])", 400, "body"},
      {"invalid utf-8", "/v1/completions", std::string("{\"prompt\": \"a\xff\xfe b\"}"), 400, "body"},
      {"temperature wrong type", "/v1/completions", R"({"prompt": "hi", "temperature": "hot"})", 400, "temperature"},
      {"max_tokens wrong type", "/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})", 400, "max_tokens"},
      {"prompt wrong type", "/v1/completions", R"({"prompt": {"text": "hi"}})", 400, "prompt"},
      {"stop wrong type", "/v1/completions", R"({"prompt": "hi", "stop": 5})", 400, "stop"},
      {"missing prompt", "/v1/completions", R"({"max_tokens": 4})", 400, "prompt"},
      {"empty prompt", "/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"empty token prompt", "/v1/completions", R"({"prompt": []})", 400, "prompt"},
      {"token id outside vocab", "/v1/completions", R"({"prompt": [1, 99999999]})", 400, "prompt"},
      {"batched prompts", "/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt"},
      {"prompt longer than context", "/v1/completions", "{\"prompt\": " + long_prompt + "}", 400, "prompt"},
      {"max_tokens 0", "/v1/completions", R"({"prompt": "hi", "max_tokens": 0})", 400, "max_tokens"},
      {"max_tokens negative", "/v1/completions", R"({"prompt": "hi", "max_tokens": -5})", 400, "max_tokens"},
      {"temperature negative", "/v1/completions", R"({"prompt": "hi", "temperature": -0.1})", 400, "temperature"},
      {"top_p zero", "/v1/completions", R"({"prompt": "hi", "top_p": 0})", 400, "top_p"},
      {"top_p above one", "/v1/completions", R"({"prompt": "hi", "top_p": 1.5})", 400, "top_p"},
      {"n > 1", "/v1/completions", R"({"prompt": "hi", "n": 2})", 400, "n"},
      {"logprobs too many", "/v1/completions", R"({"prompt": "hi", "logprobs": 50})", 400, "logprobs"},
      {"unknown model", "/v1/completions", R"({"prompt": "hi", "model": "gpt-9"})", 404, "model"},
      {"chat missing messages", "/v1/chat/completions", R"({"max_tokens": 3})", 400, "messages"},
      {"chat messages not array", "/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"chat empty messages", "/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"chat bad role", "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, ""},
      {"chat n > 1", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 3})", 400, "n"},
      {"chat top_logprobs without logprobs", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", 400, "top_logprobs"},
      {"chat temperature negative", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "hi"}], "temperature": -1})", 400, "temperature"},
      {"body over the size limit", "/v1/completions",
       "{\"prompt\": \"" + std::string(100 * 1024, 'a') + "\"}", 413, ""},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto [st, body] = s.post(c.path, c.body);
    EXPECT_EQ(st, c.status) << c.name << ": " << body;
    // chat_k3 names the role field in its own words; we only insist on a non-empty param.
    if (std::string(c.name) == "chat bad role") {
      Json j = Json::parse(body);
      EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    } else {
      expect_error_body(body, c.status, c.param, c.name);
    }
    expect_still_serving(s, c.name);
  }
  // Unknown route: 404 with an error object too.
  auto [st, body] = s.get("/v1/nothing");
  EXPECT_EQ(st, 404);
  expect_error_body(body, 404, "", "unknown route");
  // The context error carries its code.
  auto [st2, body2] = s.post("/v1/completions", "{\"prompt\": " + long_prompt + "}");
  EXPECT_EQ(Json::parse(body2)["error"]["code"], "context_length_exceeded");
  // Nothing leaked on the way.
  Json info = s.info();
  EXPECT_EQ(info["pools"]["kv_pages_used"], 0);
  EXPECT_EQ(info["pools"]["kda_slots_used"], 0);
}

TEST(ServerBadInput, ApiKeyIsRequiredOnV1Routes) {
  ServeConfig cfg = tiny_config();
  cfg.api_key = "sekrit";
  LiveServer s(cfg);
  auto [st, body] = s.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
  EXPECT_EQ(st, 401);
  EXPECT_EQ(Json::parse(body)["error"]["type"], "authentication_error");
  auto [st2, body2] = s.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})", {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(st2, 401);
  auto [st3, body3] = s.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})", {{"Authorization", "Bearer sekrit"}});
  EXPECT_EQ(st3, 200) << body3;
  EXPECT_EQ(s.get("/health").first, 200);  // health stays open for load balancers
}

// A refusal must consume the request's body: on a kept-alive connection an unread body would
// be parsed as the next request (httplib decides refusals before it reads bodies).
TEST(ServerBadInput, ARefusedRequestLeavesItsKeptAliveConnectionUsable) {
  ServeConfig cfg = tiny_config();
  cfg.api_key = "sekrit";
  LiveServer s(cfg);
  httplib::Client c("127.0.0.1", s.port());
  c.set_keep_alive(true);
  c.set_read_timeout(60, 0);
  const std::string big = R"({"prompt": ")" + std::string(64 * 1024, 'a') + R"(", "max_tokens": 2})";
  for (int round = 0; round < 2; ++round) {
    auto refused = c.Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, big, "application/json");
    ASSERT_TRUE(refused) << "round " << round;
    EXPECT_EQ(refused->status, 401) << refused->body;
    auto ok = c.Post("/v1/completions", {{"Authorization", "Bearer sekrit"}}, R"({"prompt": "hi", "max_tokens": 2})",
                     "application/json");
    ASSERT_TRUE(ok) << "round " << round;
    EXPECT_EQ(ok->status, 200) << "the request after a refused one on the same connection: " << ok->body;
    auto models = c.Get("/v1/models", {{"Authorization", "Bearer sekrit"}});
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200) << models->body;
  }
  // Refusals without a body are still answered before routing, unknown routes included.
  auto unknown = c.Get("/v1/nothing-here");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401);
}

TEST(ServerBadInput, ConfigValidationNamesTheField) {
  ServeConfig cfg = tiny_config();
  cfg.port = 70000;
  EXPECT_NE(cfg.validate().message().find("port"), std::string::npos);
  cfg = tiny_config();
  cfg.runtime.max_running = 0;
  EXPECT_NE(cfg.validate().message().find("max_running"), std::string::npos);
  cfg = tiny_config();
  cfg.model_dir.clear();
  EXPECT_NE(cfg.validate().message().find("model_dir"), std::string::npos);
  cfg = tiny_config();
  cfg.runtime.page_size = 0;
  EXPECT_FALSE(HttpServer::create(cfg).is_ok());
}

// --step-tokens: 0 means the chunk size, so the refusal of a negative value says so, and it comes
// from ServeConfig::validate (at startup, before the model loads), naming the flag.
TEST(ServerBadInput, StepTokensMessageStatesTheRule) {
  ServeConfig cfg = tiny_config();
  cfg.runtime.step_token_budget = 0;
  EXPECT_TRUE(cfg.validate().is_ok()) << cfg.validate().message();
  cfg.runtime.step_token_budget = -1;
  const std::string why = cfg.validate().message();
  EXPECT_NE(why.find("config step_token_budget (--step-tokens): must be >= 0 (0: the chunk size, --chunk-size), got -1"),
            std::string::npos)
      << why;
  runtime::RuntimeConfig rc;
  rc.max_model_len = 64;
  rc.num_pages = 4;
  rc.step_token_budget = -1;
  EXPECT_NE(rc.validate().message().find("must be >= 1, or 0 for the chunk size"), std::string::npos) << rc.validate().message();
}

// kv_cache_dtype: float32 (default) or bfloat16 on either device (the CUDA backend's device
// pool takes the dtype since branch cudakv); anything else is refused before any pool exists,
// naming the field.
TEST(ServerBadInput, KvCacheDtypeIsValidated) {
  runtime::RuntimeConfig rc;
  EXPECT_EQ(rc.kv_cache_dtype, DType::kF32);
  EXPECT_EQ(rc.to_json()["kv_cache_dtype"], "float32");
  DType d = DType::kF32;
  ASSERT_TRUE(runtime::parse_kv_cache_dtype("bfloat16", &d).is_ok());
  EXPECT_EQ(d, DType::kBF16);
  Status bad = runtime::parse_kv_cache_dtype("fp8", &d);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("config kv_cache_dtype"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("\"fp8\""), std::string::npos) << bad.message();
  rc.kv_cache_dtype = DType::kF16;
  rc.max_model_len = 64;
  rc.num_pages = 4;
  rc.step_token_budget = 8;
  EXPECT_NE(rc.validate().message().find("kv_cache_dtype"), std::string::npos) << rc.validate().message();
  ServeConfig cfg = tiny_config();
  cfg.runtime.kv_cache_dtype = DType::kBF16;
  EXPECT_TRUE(cfg.validate().is_ok()) << cfg.validate().message();
  EXPECT_EQ(cfg.to_json()["runtime"]["kv_cache_dtype"], "bfloat16");
  cfg.device = "cuda";
  EXPECT_TRUE(cfg.validate().is_ok()) << cfg.validate().message();
}

}  // namespace
}  // namespace pdserve::server::testing
