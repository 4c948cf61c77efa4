// Prefill + decode servers in one test process, talking over the real TCP transport (and
// the fault wrapper): greedy output equals the unified server's, token for token, across
// TP mismatches both ways; every failure ends with an error to the client and every page
// and slot back in both pools.
#include <gtest/gtest.h>

#include <future>

#include "model/test_models.h"
#include "pdserve/disagg/transfer_plan.h"
#include "pd_fixture.h"

namespace pdserve::server::testing {
namespace {

using pdserve::testing::random_ids;

// Prompts that are one token, shorter than a page, exactly one and two pages, and several
// chunks with a partial last page (page_size 16, chunk_size 32).
const std::vector<size_t> kPromptLengths = {1, 5, 16, 32, 47, 100};

Json completion_body(const std::vector<int32_t>& prompt, int max_tokens, bool stream = false) {
  return Json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true},
              {"logprobs", 2}, {"stream", stream}};
}

// Strips what differs between any two responses (ids, timestamps).
Json comparable(const std::string& body) {
  Json j = Json::parse(body);
  j.erase("id");
  j.erase("created");
  return j;
}

// Tokens, text, usage and finish reason must be identical; logprobs equal within `tol`
// (tensor parallelism sums partial products in another order: ~1e-6 apart).
void expect_same_completion(const std::string& got_body, const std::string& want_body, double tol) {
  Json got = comparable(got_body), want = comparable(want_body);
  EXPECT_EQ(got["usage"], want["usage"]);
  ASSERT_EQ(got["choices"].size(), 1u);
  const Json& g = got["choices"][0];
  const Json& w = want["choices"][0];
  EXPECT_EQ(g["text"], w["text"]);
  EXPECT_EQ(g["finish_reason"], w["finish_reason"]);
  EXPECT_EQ(g["logprobs"]["tokens"], w["logprobs"]["tokens"]);
  const Json& gl = g["logprobs"]["token_logprobs"];
  const Json& wl = w["logprobs"]["token_logprobs"];
  ASSERT_EQ(gl.size(), wl.size());
  for (size_t i = 0; i < gl.size(); ++i) EXPECT_NEAR(gl[i].get<double>(), wl[i].get<double>(), tol) << "token " << i;
}

// GET /transfers on both sides: one record per room, the formula's bytes, the same runs on
// both sides, and per-room figures that sum to the totals and to the transports' counters.
void expect_per_room_metrics_add_up(const PdPair& pd, uint64_t last_room) {
  auto [ps, pbody] = pd.prefill->get("/transfers");
  auto [ds, dbody] = pd.decode->get("/transfers");
  ASSERT_EQ(ps, 200) << pbody;
  ASSERT_EQ(ds, 200) << dbody;
  const Json pj = Json::parse(pbody), dj = Json::parse(dbody);
  ASSERT_EQ(pj["rooms"].size(), kPromptLengths.size());
  ASSERT_EQ(dj["rooms"].size(), kPromptLengths.size());
  auto src = disagg::KvLayout::from_json(pd.prefill->server().prefill()->info()["layout"]);
  auto dst = disagg::KvLayout::from_json(pd.decode->server().decode()->info()["layout"]);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  uint64_t bytes = 0, runs = 0;
  for (size_t i = 0; i < kPromptLengths.size(); ++i) {
    // Newest first: the last prompt's room leads.
    const size_t n = kPromptLengths[kPromptLengths.size() - 1 - i];
    const Json& p = pj["rooms"][i];
    const Json& d = dj["rooms"][i];
    SCOPED_TRACE("room " + p["room"].dump());
    EXPECT_EQ(p["room"].get<uint64_t>(), last_room - i);
    EXPECT_EQ(d["room"], p["room"]);
    EXPECT_TRUE(p["ok"].get<bool>() && d["ok"].get<bool>());
    const int64_t pages = (static_cast<int64_t>(n) + src->page_size - 1) / src->page_size;
    EXPECT_EQ(p["bytes"].get<uint64_t>(), disagg::room_bytes(*src, *dst, pages));
    EXPECT_EQ(d["bytes"], p["bytes"]);
    EXPECT_GE(p["runs"].get<uint64_t>(), 3u);  // at least one page run, the state, the aux row
    EXPECT_EQ(d["runs"], p["runs"]);
    EXPECT_GT(p["seconds"].get<double>(), 0.0);
    EXPECT_NEAR(p["gb_per_s"].get<double>(), p["bytes"].get<double>() / p["seconds"].get<double>() / 1e9, 1e-9);
    bytes += p["bytes"].get<uint64_t>();
    runs += p["runs"].get<uint64_t>();
  }
  EXPECT_EQ(pj["totals"]["bytes"].get<uint64_t>(), bytes);
  EXPECT_EQ(pj["totals"]["runs"].get<uint64_t>(), runs);
  EXPECT_EQ(dj["totals"]["runs"].get<uint64_t>(), runs);
  EXPECT_EQ(pd.prefill->server().prefill()->info()["transport_counters"]["bytes_sent"].get<uint64_t>(), bytes);
  // Per peer: prefill has one decode peer, decode one prefill peer, each with everything.
  ASSERT_EQ(pj["totals"]["peers"].size(), 1u);
  ASSERT_EQ(dj["totals"]["peers"].size(), 1u);
  EXPECT_EQ(pj["totals"]["peers"].begin().value()["bytes"].get<uint64_t>(), bytes);
  EXPECT_EQ(dj["totals"]["peers"].begin().value()["runs"].get<uint64_t>(), runs);
  // ?limit keeps the newest; a bad limit is a 400 with the field named.
  auto [ls, lbody] = pd.decode->get("/transfers?limit=2");
  ASSERT_EQ(ls, 200);
  EXPECT_EQ(Json::parse(lbody)["rooms"].size(), 2u);
  EXPECT_EQ(Json::parse(lbody)["rooms"][0]["room"].get<uint64_t>(), last_room);
  auto [bs, bbody] = pd.decode->get("/transfers?limit=zero");
  EXPECT_EQ(bs, 400);
  EXPECT_EQ(Json::parse(bbody)["error"]["param"], "limit");
}

class PdGreedy : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(PdGreedy, MatchesUnifiedServerTokenForToken) {
  const auto [ptp, dtp] = GetParam();
  LiveServer unified(pd_config(ServerRole::kUnified, 1));
  PdPair pd(ptp, dtp);
  uint64_t room = 1000;
  for (size_t n : kPromptLengths) {
    SCOPED_TRACE("prompt length " + std::to_string(n));
    const Json body = completion_body(random_ids(n, static_cast<uint32_t>(n)), 12);
    auto [ustatus, ubody] = unified.post("/v1/completions", body.dump());
    ASSERT_EQ(ustatus, 200) << ubody;
    PdResult r = pd.request("/v1/completions", body, ++room);
    ASSERT_EQ(r.decode_status, 200) << r.decode_body;
    ASSERT_EQ(r.prefill_status, 200) << r.prefill_body;
    // Same TP on both sides as the unified server: bit for bit; otherwise within float noise.
    expect_same_completion(r.decode_body, ubody, ptp == 1 && dtp == 1 ? 0.0 : 1e-4);
    EXPECT_EQ(Json::parse(r.decode_body)["usage"]["completion_tokens"], 12);
    pd.expect_pools_free();
  }
  // The bytes decode counted are what the layout formula predicts, for every room.
  const Json t = pd.decode->info()["disaggregation"]["transfer"];
  EXPECT_EQ(t["rooms_succeeded"].get<int64_t>(), static_cast<int64_t>(kPromptLengths.size()));
  EXPECT_EQ(t["rooms_failed"].get<int64_t>(), 0);
  EXPECT_EQ(pd.prefill->info()["disaggregation"]["transfer"]["bytes"], t["bytes"]);
  // ... and what the transports themselves counted on the wire, on both sides.
  EXPECT_EQ(pd.decode->info()["disaggregation"]["transport_counters"]["bytes_received"], t["bytes"]);
  EXPECT_EQ(pd.prefill->info()["disaggregation"]["transport_counters"]["bytes_sent"], t["bytes"]);
  const Json peer = pd.decode->info()["disaggregation"]["prefills"][0];
  EXPECT_EQ(peer["bytes"], t["bytes"]);
  EXPECT_EQ(peer["rooms_ok"].get<int64_t>(), static_cast<int64_t>(kPromptLengths.size()));
  expect_per_room_metrics_add_up(pd, room);
}

INSTANTIATE_TEST_SUITE_P(TpPairs, PdGreedy, ::testing::Values(std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 2}),
                         [](const auto& info) { return "P" + std::to_string(info.param.first) + "_D" + std::to_string(info.param.second); });

// A seeded sampled request gives the unified server's tokens: decode continues the seed's
// stream after the token prefill drew, with that token in the penalties.
TEST(PdServe, SeededSamplingMatchesUnified) {
  LiveServer unified(pd_config(ServerRole::kUnified, 1));
  PdPair pd(1, 1);
  uint64_t room = 3000;
  for (size_t n : {5u, 47u}) {
    for (int seed : {1, 2, 3}) {
      SCOPED_TRACE("prompt length " + std::to_string(n) + ", seed " + std::to_string(seed));
      Json body = completion_body(random_ids(n, static_cast<uint32_t>(n)), 12);
      body["temperature"] = 1.5;
      body["top_p"] = 0.95;
      body["frequency_penalty"] = 0.4;
      body["seed"] = seed;
      auto [ustatus, ubody] = unified.post("/v1/completions", body.dump());
      ASSERT_EQ(ustatus, 200) << ubody;
      PdResult r = pd.request("/v1/completions", body, ++room);
      ASSERT_EQ(r.decode_status, 200) << r.decode_body;
      expect_same_completion(r.decode_body, ubody, 0.0);
      pd.expect_pools_free();
    }
  }
}

TEST(PdServe, StreamingChatThroughThePairMatchesUnified) {
  LiveServer unified(pd_config(ServerRole::kUnified, 1));
  PdPair pd(2, 2);
  const Json body{{"messages", {{{"role", "user"}, {"content", "tell me about pages and slots"}}}},
                  {"max_tokens", 9}, {"temperature", 0}, {"stream", true}};
  auto [ustatus, ubody] = unified.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(ustatus, 200);
  PdResult r = pd.request("/v1/chat/completions", body, 77);
  ASSERT_EQ(r.decode_status, 200) << r.decode_body;
  auto text_of = [](const std::string& sse) {
    std::string all;
    for (const std::string& ev : sse_events(sse)) {
      if (ev == "[DONE]") continue;
      Json j = Json::parse(ev);
      for (const auto& c : j["choices"])
        for (const char* k : {"content", "reasoning_content"})
          if (c["delta"].contains(k)) all += c["delta"][k].get<std::string>();
    }
    return all;
  };
  EXPECT_EQ(text_of(r.decode_body), text_of(ubody));
  EXPECT_FALSE(text_of(ubody).empty());
  pd.expect_pools_free();
}

TEST(PdServe, UnifiedTp2MatchesTp1) {
  LiveServer tp1(pd_config(ServerRole::kUnified, 1));
  LiveServer tp2(pd_config(ServerRole::kUnified, 2));
  for (size_t n : {3, 40}) {
    const Json body = completion_body(random_ids(n, 99), 10);
    auto a = tp1.post("/v1/completions", body.dump());
    auto b = tp2.post("/v1/completions", body.dump());
    ASSERT_EQ(a.first, 200);
    ASSERT_EQ(b.first, 200);
    expect_same_completion(b.second, a.second, 1e-4);
  }
}

// Pipeline-parallel prefill: each stage computes its layers' pages and KDA state; the engine
// gathers them into the whole-model pools before the hooks send, so decode (any TP) gets the
// same bytes as from a one-stage prefill.
TEST(PdServe, PipelinePrefillToDecodeMatchesUnified) {
  LiveServer unified(pd_config(ServerRole::kUnified, 1));
  for (auto [pp, ptp] : {std::pair{2, 1}, std::pair{3, 2}}) {
    SCOPED_TRACE("prefill PP" + std::to_string(pp) + " x TP" + std::to_string(ptp));
    ServeConfig pc = pd_config(ServerRole::kPrefill, ptp);
    pc.pp = pp;
    PdPair pd(ptp, 1, pc);
    EXPECT_EQ(pd.prefill->info()["parallelism"]["pp"], pp);
    uint64_t room = 5000;
    for (size_t n : {5, 47, 100}) {
      const Json body = completion_body(random_ids(n, static_cast<uint32_t>(n) + 7), 10);
      auto [ustatus, ubody] = unified.post("/v1/completions", body.dump());
      ASSERT_EQ(ustatus, 200) << ubody;
      PdResult r = pd.request("/v1/completions", body, ++room);
      ASSERT_EQ(r.decode_status, 200) << r.decode_body;
      ASSERT_EQ(r.prefill_status, 200) << r.prefill_body;
      // PP alone changes no arithmetic: bit for bit; with TP2 inside the stages, float noise.
      expect_same_completion(r.decode_body, ubody, ptp == 1 ? 0.0 : 1e-4);
      pd.expect_pools_free();
    }
  }
}

TEST(PdServe, UnifiedPp2MatchesPp1AndBadSplitsNameTheFlag) {
  LiveServer pp1(pd_config(ServerRole::kUnified, 1));
  ServeConfig c2 = pd_config(ServerRole::kUnified, 1);
  c2.pp = 2;
  LiveServer pp2(c2);
  const Json body = completion_body(random_ids(40, 77), 10);
  auto a = pp1.post("/v1/completions", body.dump());
  auto b = pp2.post("/v1/completions", body.dump());
  ASSERT_EQ(a.first, 200);
  ASSERT_EQ(b.first, 200);
  expect_same_completion(b.second, a.second, 0.0);
  // More stages than layers, a decode role with stages, stages of several TP ranks on CUDA:
  // refused, naming --pp. One-GPU stages on CUDA are accepted.
  ServeConfig too_many = pd_config(ServerRole::kPrefill, 1);
  too_many.pp = 64;
  auto s = HttpServer::create(too_many);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("--pp"), std::string::npos) << s.status().message();
  ServeConfig decode = pd_config(ServerRole::kDecode, 1);
  decode.pp = 2;
  EXPECT_NE(decode.validate().message().find("--pp"), std::string::npos);
  ServeConfig cuda = pd_config(ServerRole::kPrefill, 1);
  cuda.pp = 2;
  cuda.device = "cuda";
  EXPECT_TRUE(cuda.validate().is_ok()) << cuda.validate().message();
  decode.device = "cuda";
  EXPECT_NE(decode.validate().message().find("decode takes --tp only"), std::string::npos) << decode.validate().message();
  cuda.tp = 2;
  EXPECT_NE(cuda.validate().message().find("--pp"), std::string::npos);
  EXPECT_NE(cuda.validate().message().find("--tp 1"), std::string::npos) << cuda.validate().message();
}

TEST(PdServe, PageSizeMismatchIsRefusedBeforeAnyTransfer) {
  LiveServer prefill(pd_config(ServerRole::kPrefill, 1));
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  dc.runtime.page_size = 32;
  LiveServer decode(dc);
  Json body = completion_body(random_ids(20, 5), 4);
  body["bootstrap_host"] = "127.0.0.1";
  body["bootstrap_port"] = prefill.server().prefill()->bootstrap_port();
  body["bootstrap_room"] = 5;
  auto [status, text] = decode.post("/v1/completions", body.dump());
  EXPECT_EQ(status, 400);
  EXPECT_NE(text.find("page_size: prefill 16, decode 32"), std::string::npos) << text;
  EXPECT_EQ(decode.info()["disaggregation"]["transfer"]["bytes"], 0);
  EXPECT_EQ(prefill.info()["disaggregation"]["transfer"]["bytes"], 0);
  EXPECT_EQ(decode.info()["disaggregation"]["rooms"], 0);
  EXPECT_EQ(decode.server().engine().stats().pages_used, 0);
}

TEST(PdServe, DifferentWeightsBehindTheSameConfigAreRefused) {
  // Same preset, another seed: identical config.json and shard sizes, different weights.
  LiveServer prefill(pd_config(ServerRole::kPrefill, 1));
  ServeConfig dc = pd_config(ServerRole::kDecode, 1);
  dc.model_dir = pdserve::testing::tiny_model_dir("tiny-k3-wide", 999);
  LiveServer decode(dc);
  Json body = completion_body(random_ids(10, 5), 4);
  body["bootstrap_host"] = "127.0.0.1";
  body["bootstrap_port"] = prefill.server().prefill()->bootstrap_port();
  body["bootstrap_room"] = 6;
  auto [status, text] = decode.post("/v1/completions", body.dump());
  EXPECT_EQ(status, 400);
  EXPECT_NE(text.find("model (fingerprint of config.json and weights)"), std::string::npos) << text;
}

TEST(PdServe, RequestsWithoutBootstrapFieldsAreRefusedByBothRoles) {
  PdPair pd(1, 1);
  const std::string body = completion_body({1, 2, 3}, 2).dump();
  for (LiveServer* s : {pd.prefill.get(), pd.decode.get()}) {
    auto [status, text] = s->post("/v1/completions", body);
    EXPECT_EQ(status, 400);
    EXPECT_NE(text.find("bootstrap_room: required"), std::string::npos) << text;
  }
  // Half a bootstrap is an error that names the missing field.
  Json half = completion_body({1, 2, 3}, 2);
  half["bootstrap_room"] = 9;
  auto [status, text] = pd.decode->post("/v1/completions", half.dump());
  EXPECT_EQ(status, 400);
  EXPECT_NE(text.find("bootstrap_host"), std::string::npos) << text;
}

TEST(PdServe, ABusyPortIsABindErrorNotASharedPort) {
  PdPair pd(1, 1);
  ServeConfig again = pd_config(ServerRole::kUnified, 1);
  again.port = pd.decode->port();
  auto s = HttpServer::create(again);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto port = (*s)->bind();
  EXPECT_FALSE(port.is_ok());
  // Nor can a second prefill take the first one's bootstrap port.
  ServeConfig p2 = pd_config(ServerRole::kPrefill, 1);
  p2.disagg.bootstrap_port = pd.bootstrap_port();
  auto s2 = HttpServer::create(p2);
  ASSERT_FALSE(s2.is_ok());
  EXPECT_NE(s2.status().message().find("bootstrap server: cannot bind"), std::string::npos) << s2.status().message();
}

TEST(PdServe, HealthGenerateRunsOnBothRoles) {
  PdPair pd(1, 1);
  EXPECT_EQ(pd.prefill->get("/health_generate").first, 200);
  EXPECT_EQ(pd.decode->get("/health_generate").first, 200);
  pd.expect_pools_free();
}

}  // namespace
}  // namespace pdserve::server::testing
