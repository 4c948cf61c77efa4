// Each configurable limit answers with its documented error: prompt tokens and max_tokens
// (400 naming the field), the per-request deadline (504, pages and slot freed).
#include <gtest/gtest.h>

#include "server/cuda_options.h"
#include "server_fixture.h"

namespace pdserve::server::testing {
namespace {

Json error_of(const std::string& body) { return Json::parse(body)["error"]; }

std::string ids(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(10 + i);
  return s + "]";
}

TEST(Limits, PromptTokensAreCappedNamingTheField) {
  ServeConfig cfg = tiny_config();
  cfg.max_prompt_tokens = 8;
  LiveServer s(cfg);
  auto [st, body] = s.post("/v1/completions", R"({"prompt": )" + ids(9) + R"(, "max_tokens": 1})");
  EXPECT_EQ(st, 400);
  EXPECT_EQ(error_of(body)["param"], "prompt") << body;
  EXPECT_NE(body.find("max_prompt_tokens"), std::string::npos) << body;
  auto ok = s.post("/v1/completions", R"({"prompt": )" + ids(8) + R"(, "max_tokens": 1})");
  EXPECT_EQ(ok.first, 200) << ok.second;
  auto [cst, cbody] = s.post("/v1/chat/completions",
                             R"({"messages": [{"role": "user", "content": "a rather long message of many words"}]})");
  EXPECT_EQ(cst, 400);
  EXPECT_EQ(error_of(cbody)["param"], "messages") << cbody;
}

TEST(Limits, MaxTokensIsCappedAndChatDefaultsStayUnderTheCap) {
  ServeConfig cfg = tiny_config();
  cfg.max_completion_tokens = 5;
  LiveServer s(cfg);
  auto [st, body] = s.post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 6})");
  EXPECT_EQ(st, 400);
  EXPECT_EQ(error_of(body)["param"], "max_tokens") << body;
  EXPECT_NE(body.find("max_completion_tokens"), std::string::npos) << body;
  auto [cst, cbody] = s.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}],
                                                        "max_completion_tokens": 50})");
  EXPECT_EQ(cst, 400);
  EXPECT_EQ(error_of(cbody)["param"], "max_completion_tokens") << cbody;
  // Without max_tokens a chat request gets the rest of the context, but never past the cap.
  auto [dst, dbody] = s.post("/v1/chat/completions",
                             R"({"messages": [{"role": "user", "content": "Hi"}], "ignore_eos": true, "temperature": 0})");
  ASSERT_EQ(dst, 200) << dbody;
  EXPECT_EQ(Json::parse(dbody)["usage"]["completion_tokens"], 5);
}

TEST(Limits, RequestDeadlineEndsTheRequestWith504AndFreesItsPages) {
  ServeConfig cfg = tiny_config();
  cfg.runtime.request_timeout_s = 0.05;
  LiveServer s(cfg);
  const std::string long_body = R"({"prompt": "Hi", "max_tokens": 1000, "ignore_eos": true, "temperature": 0)";
  auto [st, body] = s.post("/v1/completions", long_body + "}");
  EXPECT_EQ(st, 504) << body;
  EXPECT_EQ(error_of(body)["type"], "timeout_error") << body;
  EXPECT_NE(body.find("request_timeout_s"), std::string::npos) << body;
  // Streamed: an error event, then [DONE].
  auto [sst, sbody] = s.post("/v1/completions", long_body + R"(, "stream": true})");
  EXPECT_EQ(sst, 200);
  auto events = sse_events(sbody);
  ASSERT_GE(events.size(), 2u) << sbody;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(Json::parse(events[events.size() - 2])["error"]["type"], "timeout_error") << sbody;
  Json info = s.info();
  EXPECT_EQ(info["pools"]["kv_pages_used"], 0);
  EXPECT_EQ(info["pools"]["kda_slots_used"], 0);
  // A short request still fits in the deadline.
  auto ok = s.post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 1})");
  EXPECT_EQ(ok.first, 200) << ok.second;
}

TEST(Limits, BadLimitValuesAreRefusedAtStartupNamingTheField) {
  ServeConfig cfg = tiny_config();
  cfg.max_prompt_tokens = -1;
  EXPECT_NE(cfg.validate().message().find("max_prompt_tokens"), std::string::npos);
  cfg = tiny_config();
  cfg.runtime.request_timeout_s = -1;
  EXPECT_NE(cfg.validate().message().find("request_timeout_s"), std::string::npos);
  cfg = tiny_config();
  cfg.drain_timeout_s = -1;
  EXPECT_NE(cfg.validate().message().find("drain_timeout_s"), std::string::npos);
  // A CUDA-only switch on the CPU backend is a mistake to point out, not to ignore.
  cfg = tiny_config();
  cfg.cuda_bf16_mla_prefill = true;
  EXPECT_NE(cfg.validate().message().find("--bf16-mla-prefill"), std::string::npos);
  cfg.device = "cuda";
  EXPECT_TRUE(cfg.validate().is_ok()) << cfg.validate().message();
  cfg = tiny_config();
  cfg.cuda_bf16_kda_prefill = true;
  EXPECT_NE(cfg.validate().message().find("--bf16-kda-prefill"), std::string::npos);
  EXPECT_EQ(cfg.to_json()["cuda_bf16_kda_prefill"], true);
  cfg.device = "cuda";
  EXPECT_TRUE(cfg.validate().is_ok()) << cfg.validate().message();
}

// The E4M3 MoE shuffle reaches the CUDA backend on the decode role only (the prefill grouped GEMM
// reads the bf16 one), and --no-e4m3-moe-decode turns it off there.
TEST(ServeConfigTest, E4m3MoeDecodeOnTheDecodeRoleOnly) {
  ServeConfig cfg = tiny_config();
  cfg.device = "cuda";
  EXPECT_TRUE(cfg.cuda_e4m3_moe_decode);
  EXPECT_EQ(cfg.to_json()["cuda_e4m3_moe_decode"], true);
  for (ServerRole role : {ServerRole::kUnified, ServerRole::kPrefill, ServerRole::kDecode}) {
    cfg.role = role;
    EXPECT_EQ(cuda_forward_options(cfg, 0).e4m3_moe_decode, role == ServerRole::kDecode) << server_role_name(role);
  }
  cfg.cuda_e4m3_moe_decode = false;
  EXPECT_FALSE(cuda_forward_options(cfg, 0).e4m3_moe_decode);
  EXPECT_EQ(cfg.to_json()["cuda_e4m3_moe_decode"], false);
}

}  // namespace
}  // namespace pdserve::server::testing
