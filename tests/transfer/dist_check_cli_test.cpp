// `pdserve dist-check --device cpu` as two processes on one host, node 0 and node 1: the
// leader hands its id to the follower through the real rank bootstrap (with and without the
// cluster secret), a wrong secret is refused, and `serve` checks the multi-node flags.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <regex>
#include <string>

#include "cli_test_util.h"

namespace {

using pdserve::testing::free_loopback_port;
using pdserve::testing::run_pdserve;

std::string secret_file(const std::string& name, const std::string& secret) {
  const std::string path = ::testing::TempDir() + "/pdserve_dist_" + name + "_" + std::to_string(::getpid());
  std::ofstream(path) << secret << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

std::string digest(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("group id sha256 ([0-9a-f]{16})")) ? m[1].str() : "";
}

// Node 0 and node 1 as two processes; returns (leader, follower) results.
std::pair<std::pair<int, std::string>, std::pair<int, std::string>> two_nodes(const std::string& leader_extra, const std::string& follower_extra) {
  const std::string flags = "dist-check --device cpu --nnodes 2 --dist-init-addr 127.0.0.1:" + std::to_string(free_loopback_port());
  // The follower starts first: it retries until the leader listens.
  auto follower = std::async(std::launch::async, [&] { return run_pdserve(flags + " --node-rank 1 --timeout 20 " + follower_extra); });
  auto leader = run_pdserve(flags + " --node-rank 0 " + leader_extra);
  return {leader, follower.get()};
}

TEST(DistCheckCli, TheFollowerGetsTheLeadersIdWithoutASecret) {
  auto [leader, follower] = two_nodes("--timeout 20", "");
  ASSERT_EQ(leader.first, 0) << leader.second;
  ASSERT_EQ(follower.first, 0) << follower.second;
  EXPECT_NE(digest(leader.second), "") << leader.second;
  EXPECT_EQ(digest(leader.second), digest(follower.second)) << leader.second << follower.second;
  EXPECT_NE(leader.second.find("node 0 of 2: group id sha256 " + digest(leader.second) + " (made here, handed to 1 node(s)), unauthenticated"),
            std::string::npos) << leader.second;
  EXPECT_NE(follower.second.find("id exchange ok"), std::string::npos) << follower.second;
}

TEST(DistCheckCli, TheFollowerGetsTheLeadersIdWithTheClusterSecret) {
  const std::string s = secret_file("same", "correct horse battery staple");
  auto [leader, follower] = two_nodes("--timeout 20 --cluster-secret-file " + s, "--cluster-secret-file " + s);
  ASSERT_EQ(leader.first, 0) << leader.second;
  ASSERT_EQ(follower.first, 0) << follower.second;
  EXPECT_EQ(digest(leader.second), digest(follower.second)) << leader.second << follower.second;
  EXPECT_NE(follower.second.find("authenticated with the cluster secret"), std::string::npos) << follower.second;
}

TEST(DistCheckCli, AFollowerWithAnotherSecretIsRefused) {
  auto [leader, follower] = two_nodes("--timeout 3 --cluster-secret-file " + secret_file("right", "right secret"),
                                      "--cluster-secret-file " + secret_file("wrong", "wrong secret"));
  EXPECT_EQ(follower.first, 1) << follower.second;
  EXPECT_NE(follower.second.find("refused rank 1"), std::string::npos) << follower.second;
  EXPECT_EQ(digest(follower.second), "") << follower.second;
  EXPECT_EQ(leader.first, 1) << leader.second;
  EXPECT_NE(leader.second.find("1 refused"), std::string::npos) << leader.second;
}

TEST(DistCheckCli, AFollowerWithoutALeaderNamesTheAddress) {
  const std::string addr = "127.0.0.1:" + std::to_string(free_loopback_port());
  auto [rc, out] = run_pdserve("dist-check --device cpu --nnodes 2 --node-rank 1 --timeout 0.3 --dist-init-addr " + addr);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("no NCCL unique id from the leader at --dist-init-addr " + addr), std::string::npos) << out;
}

TEST(DistCheckCli, ServeChecksTheMultiNodeFlags) {
  const std::string base = "serve --model /nonexistent-model --device cuda --tp 2 --nnodes 2 ";
  auto [rc, out] = run_pdserve(base + "--node-rank 2 --dist-init-addr 127.0.0.1:29500");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--node-rank"), std::string::npos) << out;
  std::tie(rc, out) = run_pdserve(base + "--node-rank 1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--dist-init-addr: required"), std::string::npos) << out;
  std::tie(rc, out) = run_pdserve("prefill --model /nonexistent-model --device cpu --tp 2 --nnodes 2 --node-rank 1 --pp 3 --dist-init-addr 127.0.0.1:29500");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("3 pipeline stages do not split evenly over 2 nodes"), std::string::npos) << out;
  std::tie(rc, out) = run_pdserve("decode --model /nonexistent-model --device cpu --tp 2 --nnodes 2 --node-rank 0 --pp 2 --dist-init-addr 127.0.0.1:29500");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--pp"), std::string::npos) << out;
  // Consistent flags: a follower waits for its leader, then says where it looked.
  const std::string addr = "127.0.0.1:" + std::to_string(free_loopback_port());
  std::tie(rc, out) = run_pdserve(base + "--node-rank 1 --dist-timeout 0.3 --dist-init-addr " + addr);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("no leader answered at --dist-init-addr " + addr), std::string::npos) << out;
}

}  // namespace
