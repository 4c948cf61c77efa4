// The multi-node flags and the NCCL-id hand-out from node 0 (dist_init.h), through the real
// rank bootstrap over loopback TCP, with nodes as threads.
#include "pdserve/transfer/dist_init.h"

#include <gtest/gtest.h>

#include "cli_test_util.h"

#include <atomic>
#include <future>

namespace pdserve::transfer {
namespace {

using namespace std::chrono_literals;

using pdserve::testing::free_loopback_port;

bool mentions(const Status& st, const std::string& what) { return st.message().find(what) != std::string::npos; }

TEST(DistInit, AddressIsHostColonPort) {
  auto hp = parse_dist_init_addr("node-a.cluster:29500");
  ASSERT_TRUE(hp.is_ok()) << hp.status().message();
  EXPECT_EQ(hp->host, "node-a.cluster");
  EXPECT_EQ(hp->port, 29500);
  auto v6 = parse_dist_init_addr("[fe80::1]:7");
  ASSERT_TRUE(v6.is_ok()) << v6.status().message();
  EXPECT_EQ(v6->host, "fe80::1");
  for (const char* bad : {"node-a", "node-a:", ":29500", "node-a:0", "node-a:65536", "node-a:29x", "[fe80::1:7"}) {
    auto r = parse_dist_init_addr(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_TRUE(mentions(r.status(), "--dist-init-addr")) << r.status().message();
  }
}

TEST(DistInit, InconsistentFlagsAreRefusedNamingTheFlag) {
  EXPECT_TRUE(validate_dist_init({1, 0, ""}, 3).is_ok());  // one node: nothing else needed
  EXPECT_TRUE(validate_dist_init({2, 1, "10.0.0.1:29500"}, 8).is_ok());
  EXPECT_TRUE(mentions(validate_dist_init({2, 2, "10.0.0.1:29500"}, 8), "--node-rank"));
  EXPECT_TRUE(mentions(validate_dist_init({2, -1, "10.0.0.1:29500"}, 8), "--node-rank"));
  EXPECT_TRUE(mentions(validate_dist_init({0, 0, ""}, 8), "--nnodes"));
  EXPECT_TRUE(mentions(validate_dist_init({4, 0, "10.0.0.1:29500"}, 6), "--tp 6 does not split evenly over --nnodes 4"));
  EXPECT_TRUE(mentions(validate_dist_init({2, 0, ""}, 4), "--dist-init-addr: required"));
  EXPECT_TRUE(mentions(validate_dist_init({2, 0, "10.0.0.1"}, 4), "--dist-init-addr"));
}

// Three nodes: only the leader makes the id; every node ends with the same bytes.
void expect_three_nodes_share_one_id(const std::string& secret) {
  const std::string addr = "127.0.0.1:" + std::to_string(free_loopback_port());
  std::atomic<int> made{0};
  auto make = [&]() -> Result<std::vector<uint8_t>> {
    ++made;
    return std::vector<uint8_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, static_cast<uint8_t>(secret.size())};
  };
  std::vector<std::future<Result<std::vector<uint8_t>>>> nodes;
  // Followers first: they retry until the leader listens.
  for (int r : {2, 1, 0}) nodes.push_back(std::async(std::launch::async, [&, r] { return share_group_id({3, r, addr}, secret, 10s, make); }));
  std::vector<std::vector<uint8_t>> ids;
  for (auto& f : nodes) {
    auto id = f.get();
    ASSERT_TRUE(id.is_ok()) << id.status().message();
    ids.push_back(*id);
  }
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(ids[0], ids[2]);
  EXPECT_EQ(ids[1], ids[2]);
  EXPECT_EQ(ids[2].back(), secret.size());
}

TEST(DistInit, NodesShareTheLeadersIdWithoutASecret) { expect_three_nodes_share_one_id(""); }
TEST(DistInit, NodesShareTheLeadersIdWithTheClusterSecret) { expect_three_nodes_share_one_id("cluster-s3cret"); }

TEST(DistInit, AFollowerWithAnotherSecretIsRefusedAndTheLeaderSaysWhy) {
  const std::string addr = "127.0.0.1:" + std::to_string(free_loopback_port());
  auto make = []() -> Result<std::vector<uint8_t>> { return std::vector<uint8_t>(128, 1); };
  auto leader = std::async(std::launch::async, [&] { return share_group_id({2, 0, addr}, "right", 2s, make); });
  auto follower = share_group_id({2, 1, addr}, "wrong", 10s, make);
  ASSERT_FALSE(follower.is_ok());
  EXPECT_TRUE(mentions(follower.status(), "refused")) << follower.status().message();
  EXPECT_TRUE(mentions(follower.status(), addr)) << follower.status().message();
  auto l = leader.get();
  ASSERT_FALSE(l.is_ok());
  EXPECT_EQ(l.status().code(), ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(mentions(l.status(), "0 of 1 ranks joined")) << l.status().message();
  EXPECT_TRUE(mentions(l.status(), "1 refused")) << l.status().message();
}

TEST(DistInit, AFollowerWithoutALeaderTimesOutNamingTheAddress) {
  const std::string addr = "127.0.0.1:" + std::to_string(free_loopback_port());
  int made = 0;
  auto r = share_group_id({2, 1, addr}, "", 300ms, [&]() -> Result<std::vector<uint8_t>> {
    ++made;
    return std::vector<uint8_t>(128, 1);
  });
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(mentions(r.status(), "node 1 of 2: no NCCL unique id from the leader at --dist-init-addr " + addr)) << r.status().message();
  EXPECT_EQ(made, 0);  // a follower never makes an id of its own
}

TEST(DistInit, TheLeaderFailsFastWhenItsAddressIsTaken) {
  // Another process's listener holds the port.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t n = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  const std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  int made = 0;
  auto r = share_group_id({2, 0, addr}, "", 3s, [&]() -> Result<std::vector<uint8_t>> {
    ++made;
    return std::vector<uint8_t>(128, 1);
  });
  ::close(fd);
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(mentions(r.status(), "node 0 of 2 (leader): cannot listen on --dist-init-addr " + addr)) << r.status().message();
  EXPECT_EQ(made, 0);  // before NCCL is touched
}

}  // namespace
}  // namespace pdserve::transfer
