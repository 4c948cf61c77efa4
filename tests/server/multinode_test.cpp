// One instance over two `pdserve serve` processes (--nnodes 2 --device cpu, on loopback):
// node 0 serves HTTP, node 1 follows its steps, and their TP ranks meet in TCP collectives.
// The replies must equal a one-process --tp 2 server's bit for bit (same shards, sums in the
// same rank order) and agree with --tp 1. Then the failures: a follower killed mid-request
// fails that request and every later one with a clear error (the leader stays up, /health
// says why); a leader that vanishes makes its follower exit 1 saying so; a leader stopping
// normally makes it exit 0. Pipeline stages over three nodes (`serve --pp 3`, whole stages a
// node, the middle boundary relayed by node 0) answer like one process too.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <functional>
#include <future>

#include "child_server.h"
#include "server_fixture.h"
#include "transfer/cli_test_util.h"

namespace pdserve::server::testing {
namespace {

const std::string kModel = "tiny-k3-wide";  // heads and experts split over two ranks

std::vector<std::string> serve_args(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"serve", "--model", pdserve::testing::tiny_model_dir(kModel), "--host", "127.0.0.1", "--port", "0",
                                "--device", "cpu", "--page-size", "16", "--max-running", "4"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Leader and follower of one two-node instance; the follower is started first on another
// thread, since neither side is ready before the other joined.
struct TwoNodes {
  std::unique_ptr<ChildServer> leader, follower;
  explicit TwoNodes(const std::string& tp = "2") {
    const std::string addr = "127.0.0.1:" + std::to_string(pdserve::testing::free_loopback_port());
    // Both argument lists on this thread: serve_args makes the tiny model on first use, and
    // two threads making it at once aborted the test process now and then.
    const auto follower_args = serve_args({"--tp", tp, "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", addr});
    const auto leader_args = serve_args({"--tp", tp, "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", addr});
    auto f = std::async(std::launch::async, [&] { return std::make_unique<ChildServer>(follower_args, "following the leader", true); });
    leader = std::make_unique<ChildServer>(leader_args);
    follower = f.get();
  }
};

struct Client {
  int port;
  std::pair<int, std::string> get(const std::string& path) const { return http_get(port, path); }
  std::pair<int, std::string> post(const std::string& body) const { return http_post(port, body); }
};

const std::vector<std::string> kPrompts = {"Hello", "The quick brown fox", "1, 2, 3,"};

std::string request(const std::string& prompt) {
  return Json{{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}}.dump();
}

// Each prompt's (text, logprobs object) from a server.
std::vector<Json> replies(int port) {
  std::vector<Json> out;
  Client c{port};
  for (const std::string& p : kPrompts) {
    auto [status, body] = c.post(request(p));
    EXPECT_EQ(status, 200) << body;
    Json j = Json::parse(body, nullptr, false);
    if (!j.is_object() || !j.contains("choices")) {
      out.push_back(Json());
      continue;
    }
    out.push_back(Json{{"text", j["choices"][0]["text"]}, {"logprobs", j["choices"][0]["logprobs"]}});
  }
  return out;
}

TEST(MultiNode, TwoProcessesAnswerLikeOneProcessAndLikeOneRank) {
  std::vector<Json> one_rank, one_process;
  {
    ChildServer tp1(serve_args({"--tp", "1"}));
    ASSERT_GT(tp1.port(), 0) << tp1.log();
    one_rank = replies(tp1.port());
  }
  {
    ChildServer tp2(serve_args({"--tp", "2"}));
    ASSERT_GT(tp2.port(), 0) << tp2.log();
    one_process = replies(tp2.port());
  }
  TwoNodes n;
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  const std::vector<Json> two_nodes = replies(n.leader->port());
  // Several requests in one batch too: the step message carries every sequence.
  std::vector<std::future<std::pair<int, std::string>>> together;
  for (const std::string& p : kPrompts) together.push_back(std::async(std::launch::async, [&, p] { return Client{n.leader->port()}.post(request(p)); }));
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    EXPECT_EQ(two_nodes[i], one_process[i]) << "two nodes:\n" << two_nodes[i].dump() << "\none process:\n" << one_process[i].dump();
    auto [status, body] = together[i].get();
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(Json::parse(body)["choices"][0]["text"], one_process[i]["text"]);
    // Against one rank: the same greedy tokens, log-probabilities equal up to summation order.
    ASSERT_TRUE(two_nodes[i].is_object());
    EXPECT_EQ(two_nodes[i]["text"], one_rank[i]["text"]);
    const Json& a = two_nodes[i]["logprobs"]["token_logprobs"];
    const Json& b = one_rank[i]["logprobs"]["token_logprobs"];
    ASSERT_EQ(a.size(), b.size());
    for (size_t t = 0; t < a.size(); ++t) EXPECT_NEAR(a[t].get<double>(), b[t].get<double>(), 1e-3) << "token " << t;
  }
  // A normal stop: the leader tells the follower, which exits 0.
  n.leader->signal(SIGTERM);
  EXPECT_EQ(n.leader->wait_exit(std::chrono::seconds(60)), 0) << n.leader->drain_output();
  EXPECT_EQ(n.follower->wait_exit(std::chrono::seconds(60)), 0) << n.follower->drain_output();
  EXPECT_NE(n.follower->drain_output().find("the leader shut the instance down"), std::string::npos) << n.follower->drain_output();
}

// Two ranks a node: each node's ranks are threads, all four meet in the TCP collectives.
TEST(MultiNode, FourRanksOverTwoNodesAnswerLikeOneProcess) {
  std::vector<Json> one_process;
  {
    ChildServer tp4(serve_args({"--tp", "4"}));
    ASSERT_GT(tp4.port(), 0) << tp4.log();
    one_process = replies(tp4.port());
  }
  TwoNodes n("4");
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  EXPECT_NE(n.follower->log().find("ranks 2..3 of 4"), std::string::npos) << n.follower->log();
  const std::vector<Json> two_nodes = replies(n.leader->port());
  for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(two_nodes[i], one_process[i]) << kPrompts[i];
}

TEST(MultiNode, AFollowerKilledMidRequestFailsItAndEveryLaterRequestClearly) {
  TwoNodes n;
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  Client c{n.leader->port()};
  ASSERT_EQ(c.get("/health").first, 200);
  // Thousands of decode steps: still running when the follower dies.
  auto long_request = std::async(std::launch::async, [&] {
    return c.post(R"({"prompt": "Hello", "max_tokens": 6000, "ignore_eos": true, "temperature": 0})");
  });
  ASSERT_TRUE(wait_for([&] {
    auto [s, b] = c.get("/get_server_info");
    Json j = Json::parse(b, nullptr, false);
    return s == 200 && j.is_object() && j["requests"]["running"].get<int64_t>() >= 1;
  })) << "the request never started";
  n.follower->kill();
  auto [status, body] = long_request.get();
  EXPECT_NE(status, 200) << body;
  EXPECT_NE(body.find("lost one of its nodes"), std::string::npos) << body;
  // The leader stays up and says why it no longer serves.
  auto health = c.get("/health");
  EXPECT_EQ(health.first, 503) << health.second;
  EXPECT_NE(health.second.find("lost one of its nodes"), std::string::npos) << health.second;
  auto later = c.post(request("Hello"));
  EXPECT_EQ(later.first, 503) << later.second;
  EXPECT_NE(later.second.find("lost one of its nodes"), std::string::npos) << later.second;
  EXPECT_EQ(n.leader->wait_exit(std::chrono::milliseconds(100)), -1) << "the leader should still run:\n" << n.leader->drain_output();
}

TEST(MultiNode, AFollowerLostBetweenRequestsIsNoticedBeforeTheNextOne) {
  TwoNodes n;
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  Client c{n.leader->port()};
  ASSERT_EQ(c.post(request("Hi")).first, 200);
  n.follower->kill();
  // No request runs: the leader's watcher sees the control stream end.
  ASSERT_TRUE(wait_for([&] { return c.get("/health").first == 503; })) << "the leader never noticed";
  EXPECT_NE(c.get("/health").second.find("node 1 of 2 left the instance"), std::string::npos) << c.get("/health").second;
  auto later = c.post(request("Hello"));
  EXPECT_EQ(later.first, 503) << later.second;
  EXPECT_NE(later.second.find("instance_lost_a_node"), std::string::npos) << later.second;
}

TEST(MultiNode, AFollowerWhoseLeaderVanishesExitsOneSayingSo) {
  TwoNodes n;
  ASSERT_GT(n.leader->port(), 0) << n.leader->log() << "\nfollower:\n" << n.follower->drain_output();
  ASSERT_EQ(Client{n.leader->port()}.post(request("Hi")).first, 200);
  n.leader->kill();  // SIGKILL: no shutdown frame
  EXPECT_EQ(n.follower->wait_exit(std::chrono::seconds(60)), 1);
  const std::string out = n.follower->drain_output();
  EXPECT_NE(out.find("went away"), std::string::npos) << out;
}

TEST(MultiNode, ALeaderWaitingForItsFollowersStopsOnSigterm) {
  const std::string addr = "127.0.0.1:" + std::to_string(pdserve::testing::free_loopback_port());
  ChildServer leader(serve_args({"--tp", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", addr}), "waiting for 1 node(s)", true);
  leader.signal(SIGTERM);
  EXPECT_EQ(leader.wait_exit(std::chrono::seconds(60)), 128 + SIGTERM) << leader.drain_output();
  EXPECT_NE(leader.drain_output().find("during startup"), std::string::npos) << leader.drain_output();
}

TEST(MultiNode, AFollowerWithAnotherSecretIsRefused) {
  const std::string addr = "127.0.0.1:" + std::to_string(pdserve::testing::free_loopback_port());
  const std::string dir = ::testing::TempDir();
  auto secret_file = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/multinode_" + name;
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    ::chmod(path.c_str(), 0600);
    return path;
  };
  const std::string right = secret_file("right", "right secret"), wrong = secret_file("wrong", "wrong secret");
  // The leader waits for its follower; run it in the background and stop it afterwards.
  ChildServer leader(serve_args({"--tp", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", addr, "--cluster-secret-file", right}),
                     "waiting for 1 node(s)", true);
  auto [rc, out] = pdserve::testing::run_pdserve(
      "serve --device cpu --model " + pdserve::testing::tiny_model_dir(kModel) + " --tp 2 --nnodes 2 --node-rank 1 --dist-init-addr " + addr +
      " --cluster-secret-file " + wrong);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("refused node 1"), std::string::npos) << out;
  leader.kill();
}

// `serve --pp 3 --tp 2 --nnodes 3`: a stage of two ranks per node; boundary 0 ends on node 0,
// boundary 1 (node 1 -> node 2) is relayed by node 0's hub; decode steps run through the
// pipeline too. Equal to one process --tp 2 bit for bit, alone and batched.
TEST(MultiNodePipeline, ThreeStageNodesAnswerLikeOneProcess) {
  std::vector<Json> one_process;
  {
    ChildServer tp2(serve_args({"--tp", "2"}));
    ASSERT_GT(tp2.port(), 0) << tp2.log();
    one_process = replies(tp2.port());
  }
  const std::string addr = "127.0.0.1:" + std::to_string(pdserve::testing::free_loopback_port());
  auto node_args = [&](const std::string& rank) {
    return serve_args({"--tp", "2", "--pp", "3", "--nnodes", "3", "--node-rank", rank, "--dist-init-addr", addr});
  };
  const auto a1 = node_args("1"), a2 = node_args("2"), a0 = node_args("0");
  auto f1 = std::async(std::launch::async, [&] { return std::make_unique<ChildServer>(a1, "following the leader", true); });
  auto f2 = std::async(std::launch::async, [&] { return std::make_unique<ChildServer>(a2, "following the leader", true); });
  ChildServer leader(a0);
  auto n1 = f1.get();
  auto n2 = f2.get();
  ASSERT_GT(leader.port(), 0) << leader.log() << "\nnode 1:\n" << n1->drain_output() << "\nnode 2:\n" << n2->drain_output();
  EXPECT_NE(n2->log().find("pipeline stages 2..2 of 3, 2 ranks each"), std::string::npos) << n2->log();
  const std::vector<Json> three_nodes = replies(leader.port());
  std::vector<std::future<std::pair<int, std::string>>> together;
  for (const std::string& p : kPrompts) together.push_back(std::async(std::launch::async, [&, p] { return Client{leader.port()}.post(request(p)); }));
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    EXPECT_EQ(three_nodes[i], one_process[i]) << "three nodes:\n" << three_nodes[i].dump() << "\none process:\n" << one_process[i].dump();
    auto [status, body] = together[i].get();
    ASSERT_EQ(status, 200) << body;
    Json j = Json::parse(body);
    EXPECT_EQ((Json{{"text", j["choices"][0]["text"]}, {"logprobs", j["choices"][0]["logprobs"]}}), one_process[i]) << "batched together";
  }
  leader.signal(SIGTERM);
  EXPECT_EQ(leader.wait_exit(std::chrono::seconds(60)), 0) << leader.drain_output();
  EXPECT_EQ(n1->wait_exit(std::chrono::seconds(60)), 0) << n1->drain_output();
  EXPECT_EQ(n2->wait_exit(std::chrono::seconds(60)), 0) << n2->drain_output();
}

// Every node needs the same split: a follower started with another --pp is refused by name.
TEST(MultiNodePipeline, AFollowerWithAnotherStageCountIsRefused) {
  const std::string addr = "127.0.0.1:" + std::to_string(pdserve::testing::free_loopback_port());
  const auto fa = serve_args({"--tp", "1", "--pp", "4", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", addr});
  const auto la = serve_args({"--tp", "1", "--pp", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", addr, "--dist-timeout", "5"});
  auto f = std::async(std::launch::async, [&] { return std::make_unique<ChildServer>(fa, "following the leader", true); });
  ChildServer leader(la, "pdserve: listening on http://", true);
  auto follower = f.get();
  EXPECT_EQ(follower->wait_exit(std::chrono::seconds(60)), 2);
  const std::string out = follower->drain_output();
  EXPECT_NE(out.find("the leader runs --pp 2 --tp 1 --nnodes 2, this node was started with --pp 4"), std::string::npos) << out;
  EXPECT_LE(leader.port(), 0) << "the leader served without its follower";
}

}  // namespace
}  // namespace pdserve::server::testing
