// Prefill and decode across nodes (--nnodes 2 --device cpu, processes on loopback) behind the
// router: prefill sends every rank's pages and KDA head slice to decode's leader, which
// forwards the follower's share over the node control stream; a prefill leader fetches its
// follower's share the same way before it sends. The replies must equal a
// one-process decode of the same --tp bit for bit (same shards, same sums in rank order), and
// the same greedy text as --tp 1. Then the failures: a follower killed mid-request fails it
// with a clear error, /health says why, and the leader keeps no page or slot; a follower
// started with another command is refused by name. The same for pipeline stages split over
// the nodes (MultiNodePipeline), and decode over two nodes with a bfloat16 cache (MultiNodeBf16).
#include <gtest/gtest.h>

#include <signal.h>

#include <functional>
#include <future>

#include "child_server.h"
#include "pdserve/router/router.h"
#include "server_fixture.h"
#include "transfer/cli_test_util.h"

namespace pdserve::server::testing {
namespace {

const std::string kModel = "tiny-k3-wide";  // heads and experts split over two and four ranks

std::vector<std::string> role_args(const std::string& role, const std::string& tp, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {role, "--model", pdserve::testing::tiny_model_dir(kModel), "--host", "127.0.0.1", "--port", "0",
                                "--device", "cpu", "--page-size", "16", "--max-running", "4", "--tp", tp};
  if (role == "prefill") a.insert(a.end(), {"--bootstrap-port", "0"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A prefill or decode instance over two processes; the follower is started first on another
// thread, since neither side is ready before the other joined.
struct TwoNodes {
  std::unique_ptr<ChildServer> leader, follower;
  TwoNodes(const std::string& role, const std::string& tp, const std::string& follower_role, const std::string& timeout_s = "60",
           const std::vector<std::string>& extra = {}) {
    const std::string addr = "127.0.0.1:" + std::to_string(pdserve::testing::free_loopback_port());
    std::vector<std::string> node = {"--nnodes", "2", "--dist-init-addr", addr, "--dist-timeout", timeout_s};
    node.insert(node.end(), extra.begin(), extra.end());
    auto follower_args = role_args(follower_role, tp, node);
    auto leader_args = role_args(role, tp, node);
    follower_args.insert(follower_args.end(), {"--node-rank", "1"});
    leader_args.insert(leader_args.end(), {"--node-rank", "0"});
    auto f = std::async(std::launch::async, [&] { return std::make_unique<ChildServer>(follower_args, "following the leader", true); });
    leader = std::make_unique<ChildServer>(leader_args, "pdserve: listening on http://", true);
    follower = f.get();
  }
};

struct TwoNodeDecode : TwoNodes {
  explicit TwoNodeDecode(const std::string& tp, const std::string& follower_role = "decode", const std::string& timeout_s = "60")
      : TwoNodes("decode", tp, follower_role, timeout_s) {}
};

// A PD router in this process over one prefill and one decode.
std::unique_ptr<router::Router> pd_router(int prefill_port, int bootstrap_port, int decode_port) {
  router::RouterConfig c;
  c.mode = router::RouterMode::kPd;
  c.host = "127.0.0.1";
  c.port = 0;
  c.health.interval_s = 0.2;
  c.request_timeout_s = 300;
  c.prefill = {"http://127.0.0.1:" + std::to_string(prefill_port) + "@" + std::to_string(bootstrap_port)};
  c.decode = {"http://127.0.0.1:" + std::to_string(decode_port)};
  auto r = router::Router::create(std::move(c));
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (!r.is_ok()) return nullptr;
  Status st = (*r)->start();
  EXPECT_TRUE(st.is_ok()) << st.message();
  return st.is_ok() ? std::move(*r) : nullptr;
}

const std::vector<std::string> kPrompts = {"Hello", "The quick brown fox jumps over the lazy dog, twice", "1, 2, 3,"};

std::string request(const std::string& prompt, int max_tokens = 12) {
  return Json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}}.dump();
}

// Each prompt's (text, logprobs) through the router, one at a time, then all at once (the
// leader forwards several rooms' cache before the step that batches them).
std::unique_ptr<router::Router> pd_router(const ChildServer& prefill, int decode_port) {
  return pd_router(prefill.port(), prefill.bootstrap_port(), decode_port);
}

std::vector<Json> replies(int router_port, std::vector<Json>* together = nullptr) {
  std::vector<Json> out;
  auto essence = [](int status, const std::string& body) {
    EXPECT_EQ(status, 200) << body;
    Json j = Json::parse(body, nullptr, false);
    if (!j.is_object() || !j.contains("choices")) return Json();
    return Json{{"text", j["choices"][0]["text"]}, {"logprobs", j["choices"][0]["logprobs"]}};
  };
  for (const std::string& p : kPrompts) {
    auto [status, body] = http_post(router_port, request(p));
    out.push_back(essence(status, body));
  }
  if (together) {
    std::vector<std::future<std::pair<int, std::string>>> f;
    for (const std::string& p : kPrompts) f.push_back(std::async(std::launch::async, [=] { return http_post(router_port, request(p)); }));
    for (auto& x : f) {
      auto [status, body] = x.get();
      together->push_back(essence(status, body));
    }
  }
  return out;
}

std::vector<Json> one_node_replies(const ChildServer& prefill, const std::string& tp) {
  ChildServer decode(role_args("decode", tp));
  EXPECT_GT(decode.port(), 0) << decode.log();
  auto r = pd_router(prefill, decode.port());
  if (!r) return {};
  return replies(r->port());
}

Json server_info(int port) { return Json::parse(http_get(port, "/get_server_info").second, nullptr, false); }

bool pools_free(int port) {
  Json j = server_info(port);
  return j.is_object() && j.contains("pools") && j["pools"]["kv_pages_used"] == 0 && j["pools"]["kda_slots_used"] == 0;
}

class MultiNodePd : public ::testing::Test {
 protected:
  void SetUp() override {
    prefill_ = std::make_unique<ChildServer>(role_args("prefill", "1"));
    ASSERT_GT(prefill_->port(), 0) << prefill_->log();
    ASSERT_GT(prefill_->bootstrap_port(), 0) << prefill_->log();
  }
  std::unique_ptr<ChildServer> prefill_;
};

TEST_F(MultiNodePd, DecodeOverTwoNodesAnswersLikeOneNode) {
  const std::vector<Json> tp1 = one_node_replies(*prefill_, "1");
  const std::vector<Json> tp2 = one_node_replies(*prefill_, "2");
  ASSERT_EQ(tp2.size(), kPrompts.size());
  TwoNodeDecode n("2");
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  auto r = pd_router(*prefill_, n.leader->port());
  ASSERT_TRUE(r);
  std::vector<Json> together;
  const std::vector<Json> two_nodes = replies(r->port(), &together);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    ASSERT_TRUE(two_nodes[i].is_object());
    EXPECT_EQ(two_nodes[i], tp2[i]) << "two nodes:\n" << two_nodes[i].dump() << "\none node:\n" << tp2[i].dump();
    EXPECT_EQ(together[i], tp2[i]) << "batched together";
    // Against one rank: the same greedy tokens, log-probabilities equal up to summation order.
    EXPECT_EQ(two_nodes[i]["text"], tp1[i]["text"]);
    const Json& a = two_nodes[i]["logprobs"]["token_logprobs"];
    const Json& b = tp1[i]["logprobs"]["token_logprobs"];
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) EXPECT_NEAR(a[t].get<double>(), b[t].get<double>(), 1e-3) << "token " << t;
  }
  EXPECT_TRUE(wait_for([&] { return pools_free(n.leader->port()) && pools_free(prefill_->port()); }));
  // What the leader received for the follower and sent on (pages, then the state slice).
  Json info = server_info(n.leader->port());
  EXPECT_EQ(info["disaggregation"]["layout"]["tp"], 2) << info.dump();
  // A normal stop: the leader tells the follower, which exits 0.
  n.leader->signal(SIGTERM);
  EXPECT_EQ(n.leader->wait_exit(std::chrono::seconds(60)), 0) << n.leader->drain_output();
  EXPECT_EQ(n.follower->wait_exit(std::chrono::seconds(60)), 0) << n.follower->drain_output();
}

// Two ranks a node: the follower's frames name global ranks 2 and 3.
TEST_F(MultiNodePd, FourDecodeRanksOverTwoNodesAnswerLikeOneNode) {
  const std::vector<Json> tp4 = one_node_replies(*prefill_, "4");
  ASSERT_EQ(tp4.size(), kPrompts.size());
  TwoNodeDecode n("4");
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  EXPECT_NE(n.follower->log().find("ranks 2..3 of 4"), std::string::npos) << n.follower->log();
  auto r = pd_router(*prefill_, n.leader->port());
  ASSERT_TRUE(r);
  const std::vector<Json> two_nodes = replies(r->port());
  for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(two_nodes[i], tp4[i]) << kPrompts[i];
}

// kv_cache_dtype bfloat16 on every side: node 0 forwards the follower's pages as the pool's
// bf16 bytes (kCache frames in bfloat16, refused by a pool of another dtype), and decode TP2
// over two nodes equals one-node bf16 decode TP2 bit for bit.
TEST(MultiNodeBf16, DecodeOverTwoNodesAnswersLikeOneNode) {
  const std::vector<std::string> bf16 = {"--kv-cache-dtype", "bfloat16"};
  ChildServer prefill(role_args("prefill", "1", bf16));
  ASSERT_GT(prefill.bootstrap_port(), 0) << prefill.log();
  std::vector<Json> one_node;
  {
    ChildServer decode(role_args("decode", "2", bf16));
    ASSERT_GT(decode.port(), 0) << decode.log();
    auto r = pd_router(prefill, decode.port());
    ASSERT_TRUE(r);
    one_node = replies(r->port());
  }
  ASSERT_EQ(one_node.size(), kPrompts.size());
  TwoNodes n("decode", "2", "decode", "60", bf16);
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  EXPECT_EQ(server_info(n.leader->port())["pools"]["kv_cache_dtype"], "bfloat16");
  auto r = pd_router(prefill, n.leader->port());
  ASSERT_TRUE(r);
  const std::vector<Json> two_nodes = replies(r->port());
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    ASSERT_TRUE(two_nodes[i].is_object()) << kPrompts[i];
    EXPECT_EQ(two_nodes[i], one_node[i]) << kPrompts[i] << "\ntwo nodes:\n" << two_nodes[i].dump() << "\none node:\n" << one_node[i].dump();
  }
  EXPECT_TRUE(wait_for([&] { return pools_free(n.leader->port()) && pools_free(prefill.port()); }));
}

TEST_F(MultiNodePd, AFollowerKilledMidRequestFailsItClearlyAndLeaksNothing) {
  TwoNodeDecode n("2");
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  auto r = pd_router(*prefill_, n.leader->port());
  ASSERT_TRUE(r);
  ASSERT_EQ(http_post(r->port(), request("Hi")).first, 200);
  // Thousands of decode steps: still running when the follower dies.
  auto long_request = std::async(std::launch::async, [&] { return http_post(r->port(), request("Hello", 6000)); });
  ASSERT_TRUE(wait_for([&] {
    Json j = server_info(n.leader->port());
    return j.is_object() && j["requests"]["running"].get<int64_t>() >= 1;
  })) << "the request never started decoding";
  n.follower->kill();
  auto [status, body] = long_request.get();
  EXPECT_NE(status, 200) << body;
  EXPECT_NE(body.find("lost one of its nodes"), std::string::npos) << body;
  auto health = http_get(n.leader->port(), "/health");
  EXPECT_EQ(health.first, 503) << health.second;
  EXPECT_NE(health.second.find("lost one of its nodes"), std::string::npos) << health.second;
  // No page or KDA slot stays held on the leader (nor on the prefill).
  EXPECT_TRUE(wait_for([&] { return pools_free(n.leader->port()) && pools_free(prefill_->port()); }))
      << server_info(n.leader->port()).dump();
  // A later request is refused with the reason; the prefill frees its room too.
  auto later = http_post(r->port(), request("Hello"));
  EXPECT_NE(later.first, 200) << later.second;
  EXPECT_NE(later.second.find("lost one of its nodes"), std::string::npos) << later.second;
  EXPECT_TRUE(wait_for([&] { return pools_free(n.leader->port()) && pools_free(prefill_->port()); }));
  EXPECT_EQ(n.leader->wait_exit(std::chrono::milliseconds(100)), -1) << "the leader should still run:\n" << n.leader->drain_output();
}

// Every node runs the leader's command: a `serve` follower of a decode leader is refused by name.
TEST_F(MultiNodePd, AFollowerStartedWithAnotherCommandIsRefused) {
  TwoNodeDecode n("2", "serve", "5");  // the leader then waits 5 s for ranks that never come
  EXPECT_EQ(n.follower->wait_exit(std::chrono::seconds(60)), 2);
  const std::string out = n.follower->drain_output();
  EXPECT_NE(out.find("the leader runs `pdserve decode`, this node `pdserve serve`"), std::string::npos) << out;
  EXPECT_LE(n.leader->port(), 0) << "the leader served without its follower";
}

// Prefill across nodes: node 0 fetches the follower's pages and KDA slice before each send.
// Prefill TP2 over two nodes into decode TP1, and both spanning two nodes (the seed's shape,
// scaled down), equal one-node prefill TP2 bit for bit.
TEST(MultiNodePrefill, PrefillOverTwoNodesAnswersLikeOneNode) {
  std::vector<Json> one_node;
  {
    ChildServer prefill(role_args("prefill", "2"));
    ASSERT_GT(prefill.bootstrap_port(), 0) << prefill.log();
    one_node = one_node_replies(prefill, "1");
  }
  ASSERT_EQ(one_node.size(), kPrompts.size());
  TwoNodes p("prefill", "2", "prefill");
  ASSERT_GT(p.leader->port(), 0) << p.leader->log() << "\nfollower:\n" << p.follower->drain_output();
  const int bootstrap = p.leader->bootstrap_port();
  ASSERT_GT(bootstrap, 0) << p.leader->log();
  {
    ChildServer decode(role_args("decode", "1"));
    ASSERT_GT(decode.port(), 0) << decode.log();
    auto r = pd_router(p.leader->port(), bootstrap, decode.port());
    ASSERT_TRUE(r);
    std::vector<Json> together;
    const std::vector<Json> two_nodes = replies(r->port(), &together);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      EXPECT_EQ(two_nodes[i], one_node[i]) << kPrompts[i] << "\ntwo nodes:\n" << two_nodes[i].dump() << "\none node:\n" << one_node[i].dump();
      EXPECT_EQ(together[i], one_node[i]) << kPrompts[i] << " (batched together)";
    }
    EXPECT_TRUE(wait_for([&] { return pools_free(p.leader->port()) && pools_free(decode.port()); }));
  }
  TwoNodeDecode d("2");
  ASSERT_GT(d.leader->port(), 0) << d.leader->log() << "\nfollower:\n" << d.follower->drain_output();
  auto r = pd_router(p.leader->port(), bootstrap, d.leader->port());
  ASSERT_TRUE(r);
  const std::vector<Json> both = replies(r->port());
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    // Decode TP2 sums in another order than TP1: the same greedy text, logprobs within 1e-3.
    ASSERT_TRUE(both[i].is_object()) << kPrompts[i];
    EXPECT_EQ(both[i]["text"], one_node[i]["text"]) << kPrompts[i];
    const Json& a = both[i]["logprobs"]["token_logprobs"];
    const Json& b = one_node[i]["logprobs"]["token_logprobs"];
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) EXPECT_NEAR(a[t].get<double>(), b[t].get<double>(), 1e-3) << "token " << t;
  }
  p.leader->signal(SIGTERM);
  EXPECT_EQ(p.leader->wait_exit(std::chrono::seconds(60)), 0) << p.leader->drain_output();
  EXPECT_EQ(p.follower->wait_exit(std::chrono::seconds(60)), 0) << p.follower->drain_output();
}

// Puts decode and a PD router behind the prefill leader of p, kills p's follower while a long
// prompt runs, and checks that the prompt fails with the reason, /health answers 503 and
// neither side keeps a page or slot. Later requests go through the returned router.
struct AfterLoss {
  std::unique_ptr<ChildServer> decode;
  std::unique_ptr<router::Router> router;
};
void kill_follower_mid_prompt(TwoNodes& p, AfterLoss* out) {
  out->decode = std::make_unique<ChildServer>(role_args("decode", "1"));
  ChildServer& decode = *out->decode;
  ASSERT_GT(decode.port(), 0) << decode.log();
  out->router = pd_router(p.leader->port(), p.leader->bootstrap_port(), decode.port());
  auto& r = out->router;
  ASSERT_TRUE(r);
  ASSERT_EQ(http_post(r->port(), request("Hi")).first, 200);
  std::string prompt;
  for (int i = 0; i < 1500; ++i) prompt += std::to_string(i) + " ";
  auto long_request = std::async(std::launch::async, [&] { return http_post(r->port(), request(prompt, 4)); });
  ASSERT_TRUE(wait_for([&] {
    Json j = server_info(p.leader->port());
    return j.is_object() && j["requests"]["running"].get<int64_t>() >= 1;
  })) << "the prompt never started";
  p.follower->kill();
  auto [status, body] = long_request.get();
  EXPECT_NE(status, 200) << body;
  EXPECT_NE(body.find("lost one of its nodes"), std::string::npos) << body;
  auto health = http_get(p.leader->port(), "/health");
  EXPECT_EQ(health.first, 503) << health.second;
  EXPECT_NE(health.second.find("lost one of its nodes"), std::string::npos) << health.second;
  EXPECT_TRUE(wait_for([&] { return pools_free(p.leader->port()) && pools_free(decode.port()); }))
      << server_info(p.leader->port()).dump() << "\n" << server_info(decode.port()).dump();
}

// A prefill follower killed while a long prompt is being folded in (chunks of 8 tokens): the
// request fails with the reason, the prefill leader and decode keep no page or slot, and
// /health on the prefill leader says why.
TEST(MultiNodePrefill, AFollowerKilledMidPromptFailsItClearlyAndLeaksNothing) {
  TwoNodes p("prefill", "2", "prefill", "60", {"--chunk-size", "8"});
  ASSERT_GT(p.leader->port(), 0) << p.leader->log() << "\nfollower:\n" << p.follower->drain_output();
  AfterLoss after;
  kill_follower_mid_prompt(p, &after);
}

// Pipeline stages on two nodes (--pp 2 --nnodes 2: stage 0 on node 0, stage 1 on node 1, each
// of --tp 2 ranks in its process; activations over the stage link, the follower's verdicts and
// logits in kRound, its layers' cache fetched before the send). Prefill must equal a
// one-process prefill of the same --tp bit for bit (PP logits and cache equal PP1's), alone
// and batched (several micro-batches in flight across the link).
TEST(MultiNodePipeline, PrefillStagesOverTwoNodesAnswerLikeOneProcess) {
  std::vector<Json> one_process;
  {
    ChildServer prefill(role_args("prefill", "2"));
    ASSERT_GT(prefill.bootstrap_port(), 0) << prefill.log();
    one_process = one_node_replies(prefill, "1");
  }
  ASSERT_EQ(one_process.size(), kPrompts.size());
  TwoNodes p("prefill", "2", "prefill", "60", {"--pp", "2"});
  ASSERT_GT(p.leader->port(), 0) << p.leader->log() << "\nfollower:\n" << p.follower->drain_output();
  EXPECT_NE(p.follower->log().find("pipeline stages 1..1 of 2, 2 ranks each"), std::string::npos) << p.follower->log();
  ChildServer decode(role_args("decode", "1"));
  ASSERT_GT(decode.port(), 0) << decode.log();
  auto r = pd_router(p.leader->port(), p.leader->bootstrap_port(), decode.port());
  ASSERT_TRUE(r);
  std::vector<Json> together;
  const std::vector<Json> two_nodes = replies(r->port(), &together);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    ASSERT_TRUE(two_nodes[i].is_object()) << kPrompts[i];
    EXPECT_EQ(two_nodes[i], one_process[i]) << kPrompts[i] << "\ntwo nodes:\n" << two_nodes[i].dump() << "\none process:\n" << one_process[i].dump();
    EXPECT_EQ(together[i], one_process[i]) << kPrompts[i] << " (batched together)";
  }
  EXPECT_TRUE(wait_for([&] { return pools_free(p.leader->port()) && pools_free(decode.port()); }));
  Json info = server_info(p.leader->port());
  EXPECT_EQ(info["parallelism"]["pp"], 2) << info.dump();
  p.leader->signal(SIGTERM);
  EXPECT_EQ(p.leader->wait_exit(std::chrono::seconds(60)), 0) << p.leader->drain_output();
  EXPECT_EQ(p.follower->wait_exit(std::chrono::seconds(60)), 0) << p.follower->drain_output();
}

// The node holding stage 1 killed while a long prompt flows through the stages: the request
// fails with the reason, /health says why, and neither the prefill leader nor decode keeps a
// page or slot; later requests are refused with the reason.
TEST(MultiNodePipeline, AStageNodeKilledMidPromptFailsItClearlyAndLeaksNothing) {
  TwoNodes p("prefill", "1", "prefill", "60", {"--pp", "2", "--chunk-size", "8"});
  ASSERT_GT(p.leader->port(), 0) << p.leader->log() << "\nfollower:\n" << p.follower->drain_output();
  AfterLoss after;
  kill_follower_mid_prompt(p, &after);
  if (::testing::Test::HasFatalFailure()) return;
  const auto& r = after.router;
  ChildServer& decode = *after.decode;
  auto later = http_post(r->port(), request("Hello"));
  EXPECT_NE(later.first, 200) << later.second;
  EXPECT_NE(later.second.find("lost one of its nodes"), std::string::npos) << later.second;
  EXPECT_TRUE(wait_for([&] { return pools_free(p.leader->port()) && pools_free(decode.port()); }));
  EXPECT_EQ(p.leader->wait_exit(std::chrono::milliseconds(100)), -1) << "the leader should still run:\n" << p.leader->drain_output();
}

}  // namespace
}  // namespace pdserve::server::testing
