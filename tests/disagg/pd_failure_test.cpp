// Every way a room can fail ends the same way: the client gets an error (never a hang, never
// HTTP 200 with wrong text), and both sides' pools are full again.
#include <gtest/gtest.h>

#include <future>

#include "pd_fixture.h"

namespace pdserve::server::testing {
namespace {

using pdserve::testing::random_ids;
using namespace std::chrono_literals;

Json body_of(size_t n, int max_tokens = 6, bool stream = false) {
  return Json{{"prompt", random_ids(n, 3)}, {"max_tokens", max_tokens}, {"temperature", 0},
              {"ignore_eos", true}, {"stream", stream}};
}

ServeConfig quick(ServerRole role) {
  ServeConfig c = pd_config(role, 1);
  c.disagg.bootstrap_timeout_s = 1.0;
  c.disagg.waiting_timeout_s = 1.5;
  c.disagg.heartbeat_interval_s = 0.2;
  c.disagg.heartbeat_misses = 2;
  c.disagg.release_wait_s = 0.5;
  return c;
}

TEST(PdFailure, DecodeAloneTimesOutWaitingForKv) {
  PdPair pd(1, 1, quick(ServerRole::kPrefill), quick(ServerRole::kDecode));
  auto [status, text] = pd.decode->post("/v1/completions", pd.with_bootstrap(body_of(20), 11).dump());
  EXPECT_EQ(status, 504) << text;
  EXPECT_NE(text.find("waited"), std::string::npos) << text;
  pd.expect_pools_free();
  // The target prefill received (and the abort decode sent after it gave up, which arrives
  // asynchronously) are forgotten after the bootstrap timeout: no request ever claims them.
  std::this_thread::sleep_for(1200ms);
  for (int i = 0; i < 300 && pd.prefill->info()["disaggregation"]["rooms"] != 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(pd.prefill->info()["disaggregation"]["rooms"], 0);
}

TEST(PdFailure, PrefillAloneTimesOutWaitingForDecode) {
  PdPair pd(1, 1, quick(ServerRole::kPrefill), quick(ServerRole::kDecode));
  auto [status, text] = pd.prefill->post("/v1/completions", pd.with_bootstrap(body_of(20), 12).dump());
  EXPECT_EQ(status, 504) << text;
  pd.expect_pools_free();
  EXPECT_EQ(pd.prefill->info()["disaggregation"]["rooms"], 0);
}

TEST(PdFailure, ConnectionCutMidTransferFailsBothSides) {
  FaultHook hook;
  PdPair pd(1, 1, quick(ServerRole::kPrefill), quick(ServerRole::kDecode), hook.factory());
  transfer::FaultPlan plan;
  plan.disconnect_after_bytes = 4096;  // inside the first chunk's pages
  hook.fault->set_plan(plan);
  PdResult r = pd.request("/v1/completions", body_of(100), 13);
  EXPECT_NE(r.prefill_status, 200) << r.prefill_body;
  EXPECT_NE(r.decode_status, 200) << r.decode_body;
  pd.expect_pools_free();
  EXPECT_GE(pd.decode->info()["disaggregation"]["transfer"]["rooms_failed"].get<int64_t>(), 1);
  // The pair still works afterwards (a new session replaces the cut one).
  hook.fault->set_plan({});
  PdResult ok = pd.request("/v1/completions", body_of(30), 14);
  EXPECT_EQ(ok.decode_status, 200) << ok.decode_body;
  pd.expect_pools_free();
}

// A bit flipped in flight (the transport reports success, as a bad NIC would) must never
// reach the client as fluent text with HTTP 200: the checksums catch it.
TEST(PdFailure, ACorruptedPageIsCaughtByTheChecksum) {
  FaultHook hook;
  PdPair pd(1, 1, quick(ServerRole::kPrefill), quick(ServerRole::kDecode), hook.factory());
  transfer::FaultPlan plan;
  plan.corrupt_byte = 100;  // inside the first page write
  hook.fault->set_plan(plan);
  PdResult r = pd.request("/v1/completions", body_of(40), 19);
  EXPECT_EQ(r.decode_status, 503) << r.decode_body;
  EXPECT_NE(r.decode_body.find("checksum mismatch"), std::string::npos) << r.decode_body;
  pd.expect_pools_free();
  EXPECT_EQ(pd.decode->info()["disaggregation"]["transfer"]["rooms_failed"], 1);
  // The next room, uncorrupted, goes through.
  PdResult ok = pd.request("/v1/completions", body_of(40), 20);
  EXPECT_EQ(ok.decode_status, 200) << ok.decode_body;
  pd.expect_pools_free();
  // Decode's per-room records (newest first) say which room failed and why.
  auto [st, body] = pd.decode->get("/transfers");
  ASSERT_EQ(st, 200) << body;
  const Json rooms = Json::parse(body)["rooms"];
  ASSERT_EQ(rooms.size(), 2u);
  EXPECT_EQ(rooms[0]["room"], 20);
  EXPECT_TRUE(rooms[0]["ok"].get<bool>());
  EXPECT_EQ(rooms[1]["room"], 19);
  EXPECT_FALSE(rooms[1]["ok"].get<bool>());
  EXPECT_NE(rooms[1]["error"].get<std::string>().find("checksum mismatch"), std::string::npos) << rooms[1];
  EXPECT_EQ(rooms[1]["bytes"], 0);  // nothing that failed its check counts as moved
}

// One chunk (20 tokens < chunk 32): the only batch is the last one, ending with the state runs
// and then the aux row; flip a byte in each.
TEST(PdFailure, ACorruptedStateRunOrAuxRowIsCaught) {
  for (int64_t which : {-2, -1}) {
    SCOPED_TRACE(which == -1 ? "aux row" : "last KDA state run");
    FaultHook hook;
    PdPair pd(2, 1, quick(ServerRole::kPrefill), quick(ServerRole::kDecode), hook.factory());
    transfer::FaultPlan plan;
    plan.corrupt_byte = which == -1 ? 9 : 12;  // aux: inside the room id
    plan.corrupt_write = which;
    hook.fault->set_plan(plan);
    PdResult r = pd.request("/v1/completions", body_of(20), 30 + static_cast<uint64_t>(-which));
    EXPECT_EQ(r.decode_status, 503) << r.decode_body;
    EXPECT_NE(r.decode_body.find("not trustworthy"), std::string::npos) << r.decode_body;
    pd.expect_pools_free();
  }
}

TEST(PdFailure, ChecksumSettingMustMatchOnBothSides) {
  ServeConfig pc = quick(ServerRole::kPrefill);
  pc.disagg.checksum = false;
  PdPair pd(1, 1, pc, quick(ServerRole::kDecode));
  auto [status, text] = pd.decode->post("/v1/completions", pd.with_bootstrap(body_of(10), 21).dump());
  EXPECT_EQ(status, 400);
  EXPECT_NE(text.find("checksum: prefill off, decode on"), std::string::npos) << text;
  pd.expect_pools_free();
}

TEST(PdFailure, ClientLeavingDecodeAbortsThePrefillSide) {
  FaultHook hook;
  PdPair pd(1, 1, quick(ServerRole::kPrefill), quick(ServerRole::kDecode), hook.factory());
  transfer::FaultPlan plan;
  plan.delay = 1200ms;  // the KV is late: the client gives up first
  hook.fault->set_plan(plan);
  const std::string b = pd.with_bootstrap(body_of(40, 6, true), 15).dump();
  auto p = std::async(std::launch::async, [&] { return pd.prefill->post("/v1/completions", b); });
  {
    httplib::Client c("127.0.0.1", pd.decode->port());
    c.set_read_timeout(0, 300000);  // 300 ms, then the client hangs up
    auto res = c.Post("/v1/completions", b, "application/json");
    (void)res;
  }
  auto pr = p.get();
  EXPECT_NE(pr.first, 200) << pr.second;  // decode's abort reached prefill
  pd.expect_pools_free();
}

std::vector<std::string> child_args(const char* role, const ServeConfig& c) {
  return {role, "--model", c.model_dir, "--port", "0", "--page-size", std::to_string(c.runtime.page_size),
          "--chunk-size", std::to_string(c.runtime.chunk_size), "--max-model-len", std::to_string(c.runtime.max_model_len),
          "--max-running", std::to_string(c.runtime.max_running)};
}

// Decode holds pages for a room and waits; the prefill process dies (SIGKILL). Decode's
// heartbeat notices, the room fails, the client is told, the pages come back.
TEST(PdFailure, PrefillProcessKilledFailsTheDecodeRoom) {
  std::vector<std::string> args = child_args("prefill", quick(ServerRole::kPrefill));
  args.insert(args.end(), {"--bootstrap-port", "0", "--bootstrap-timeout", "30"});
  ChildServer prefill(args);
  ASSERT_GT(prefill.bootstrap_port(), 0) << prefill.log();
  ServeConfig dc = quick(ServerRole::kDecode);
  dc.disagg.waiting_timeout_s = 30;  // the heartbeat must be what ends it
  LiveServer decode(dc);
  Json body = body_of(40);
  body["bootstrap_host"] = "127.0.0.1";
  body["bootstrap_port"] = prefill.bootstrap_port();
  body["bootstrap_room"] = 16;
  auto d = std::async(std::launch::async, [&] { return decode.post("/v1/completions", body.dump()); });
  for (int i = 0; i < 200 && decode.server().engine().stats().pages_used == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GT(decode.server().engine().stats().pages_used, 0);
  std::this_thread::sleep_for(100ms);  // let the target reach prefill (killing it mid-POST fails the room too)
  const auto t0 = std::chrono::steady_clock::now();
  prefill.kill();
  auto dr = d.get();
  EXPECT_EQ(dr.first, 503) << dr.second;
  EXPECT_TRUE(dr.second.find("heartbeat") != std::string::npos || dr.second.find("handing room to prefill") != std::string::npos)
      << dr.second;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_TRUE(PdPair::pools_free(decode));
}

// The decode process dies (SIGKILL) while prefill's send is held back: the send fails, the
// prefill request ends with an error, and prefill's pages come back.
TEST(PdFailure, DecodeProcessKilledMidTransferFailsThePrefillRequest) {
  FaultHook hook;
  LiveServer prefill(quick(ServerRole::kPrefill), hook.factory());
  transfer::FaultPlan plan;
  plan.delay = 800ms;
  hook.fault->set_plan(plan);
  ChildServer decode(child_args("decode", quick(ServerRole::kDecode)));
  ASSERT_GT(decode.port(), 0) << decode.log();
  Json body = body_of(40);
  body["bootstrap_host"] = "127.0.0.1";
  body["bootstrap_port"] = prefill.server().prefill()->bootstrap_port();
  body["bootstrap_room"] = 17;
  const std::string b = body.dump();
  auto p = std::async(std::launch::async, [&] { return prefill.post("/v1/completions", b); });
  auto d = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", decode.port());
    c.set_read_timeout(10, 0);
    auto r = c.Post("/v1/completions", b, "application/json");
    return r ? r->status : -1;
  });
  std::this_thread::sleep_for(300ms);
  decode.kill();
  EXPECT_EQ(d.get(), -1);
  auto pr = p.get();
  EXPECT_EQ(pr.first, 503) << pr.second;
  EXPECT_TRUE(PdPair::pools_free(prefill));
}

// Decode refuses a request prefill accepted (here: decode's context limit is smaller). Its
// prefill half is told at once instead of holding a thread until the bootstrap timeout.
TEST(PdFailure, ARoomDecodeRefusesIsAbortedOnPrefillAtOnce) {
  ServeConfig pc = quick(ServerRole::kPrefill);
  pc.disagg.bootstrap_timeout_s = 30;
  ServeConfig dc = quick(ServerRole::kDecode);
  dc.runtime.max_model_len = 64;
  PdPair pd(1, 1, pc, dc);
  const auto t0 = std::chrono::steady_clock::now();
  PdResult r = pd.request("/v1/completions", body_of(60, 10), 40);
  EXPECT_EQ(r.decode_status, 400) << r.decode_body;
  EXPECT_NE(r.prefill_status, 200) << r.prefill_body;
  EXPECT_NE(r.prefill_body.find("decode refused the request"), std::string::npos) << r.prefill_body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  pd.expect_pools_free();
}

TEST(PdFailure, ReusedRoomIdIsRefused) {
  PdPair pd(1, 1, quick(ServerRole::kPrefill), quick(ServerRole::kDecode));
  const std::string b = pd.with_bootstrap(body_of(20), 18).dump();
  auto first = std::async(std::launch::async, [&] { return pd.decode->post("/v1/completions", b); });
  std::this_thread::sleep_for(200ms);
  auto [status, text] = pd.decode->post("/v1/completions", b);
  EXPECT_EQ(status, 400) << text;
  EXPECT_NE(text.find("already in use"), std::string::npos) << text;
  EXPECT_EQ(first.get().first, 504);  // no prefill request: it times out cleanly
  pd.expect_pools_free();
}

}  // namespace
}  // namespace pdserve::server::testing
