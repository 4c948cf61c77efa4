// The unique-id exchange of a multi-node tensor-parallel group (rank_bootstrap.h): rank 0
// hands its id to every other rank over TCP, with the cluster secret's challenge-response.
#include "pdserve/transfer/rank_bootstrap.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

namespace pdserve::transfer {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> some_id() {
  std::vector<uint8_t> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 7 + 3);
  return id;
}

RankBootstrapConfig config(const std::string& secret, int world, std::chrono::milliseconds timeout = 5000ms) {
  RankBootstrapConfig c;
  c.secret = secret;
  c.world_size = world;
  c.timeout = timeout;
  return c;
}

TEST(RankBootstrap, EveryRankGetsRankZerosIdWithTheSecret) {
  auto server = RankBootstrapServer::listen("127.0.0.1", 0, config("s3cret", 4));
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  const uint16_t port = (*server)->port();
  auto served = std::async(std::launch::async, [&] { return (*server)->serve(some_id()); });
  std::vector<std::future<Result<std::vector<uint8_t>>>> ranks;
  for (int r = 1; r < 4; ++r)
    ranks.push_back(std::async(std::launch::async, [=] { return fetch_rank_id("127.0.0.1", port, r, config("s3cret", 4)); }));
  for (auto& f : ranks) {
    auto id = f.get();
    ASSERT_TRUE(id.is_ok()) << id.status().message();
    EXPECT_EQ(*id, some_id());
  }
  Status st = served.get();
  EXPECT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ((*server)->refused(), 0);
}

TEST(RankBootstrap, WithoutSecretBothSidesSkipTheMac) {
  auto server = RankBootstrapServer::listen("127.0.0.1", 0, config("", 2));
  ASSERT_TRUE(server.is_ok());
  auto served = std::async(std::launch::async, [&] { return (*server)->serve(some_id()); });
  auto id = fetch_rank_id("127.0.0.1", (*server)->port(), 1, config("", 2));
  ASSERT_TRUE(id.is_ok()) << id.status().message();
  EXPECT_EQ(*id, some_id());
  EXPECT_TRUE(served.get().is_ok());
}

TEST(RankBootstrap, WrongSecretIsRefusedAndTheRightRankStillJoins) {
  auto server = RankBootstrapServer::listen("127.0.0.1", 0, config("right", 2));
  ASSERT_TRUE(server.is_ok());
  const uint16_t port = (*server)->port();
  auto served = std::async(std::launch::async, [&] { return (*server)->serve(some_id()); });
  auto bad = fetch_rank_id("127.0.0.1", port, 1, config("wrong", 2));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("refused"), std::string::npos) << bad.status().message();
  auto unauth = fetch_rank_id("127.0.0.1", port, 1, config("", 2));  // no secret at all
  EXPECT_FALSE(unauth.is_ok());
  auto good = fetch_rank_id("127.0.0.1", port, 1, config("right", 2));
  ASSERT_TRUE(good.is_ok()) << good.status().message();
  EXPECT_EQ(*good, some_id());
  EXPECT_TRUE(served.get().is_ok());
  EXPECT_EQ((*server)->refused(), 2);
}

TEST(RankBootstrap, RankOutOfRangeOrRepeatedIsRefused) {
  auto server = RankBootstrapServer::listen("127.0.0.1", 0, config("k", 3));
  ASSERT_TRUE(server.is_ok());
  const uint16_t port = (*server)->port();
  auto served = std::async(std::launch::async, [&] { return (*server)->serve(some_id()); });
  EXPECT_FALSE(fetch_rank_id("127.0.0.1", port, 3, config("k", 3)).is_ok());  // world is 0..2
  EXPECT_TRUE(fetch_rank_id("127.0.0.1", port, 1, config("k", 3)).is_ok());
  EXPECT_FALSE(fetch_rank_id("127.0.0.1", port, 1, config("k", 3)).is_ok());  // rank 1 again
  EXPECT_TRUE(fetch_rank_id("127.0.0.1", port, 2, config("k", 3)).is_ok());
  EXPECT_TRUE(served.get().is_ok());
  EXPECT_EQ((*server)->refused(), 2);
}

TEST(RankBootstrap, ServerTimesOutWhenRanksAreMissing) {
  auto server = RankBootstrapServer::listen("127.0.0.1", 0, config("k", 3, 300ms));
  ASSERT_TRUE(server.is_ok());
  const uint16_t port = (*server)->port();
  auto served = std::async(std::launch::async, [&] { return (*server)->serve(some_id()); });
  EXPECT_TRUE(fetch_rank_id("127.0.0.1", port, 1, config("k", 3)).is_ok());
  Status st = served.get();  // rank 2 never comes
  EXPECT_EQ(st.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("1 of 2"), std::string::npos) << st.message();
}

TEST(RankBootstrap, ClientTimesOutWithoutRankZero) {
  uint16_t port = 0;
  {  // a port that nobody listens on any more
    auto probe = RankBootstrapServer::listen("127.0.0.1", 0, config("", 2));
    ASSERT_TRUE(probe.is_ok());
    port = (*probe)->port();
  }
  auto id = fetch_rank_id("127.0.0.1", port, 1, config("", 2, 300ms));
  ASSERT_FALSE(id.is_ok());
  EXPECT_EQ(id.status().code(), ErrorCode::kDeadlineExceeded);
}

TEST(RankBootstrap, RankZeroMayStartAfterTheOthers) {
  uint16_t port = 0;
  {
    auto probe = RankBootstrapServer::listen("127.0.0.1", 0, config("", 2));
    ASSERT_TRUE(probe.is_ok());
    port = (*probe)->port();
  }
  auto client = std::async(std::launch::async, [=] { return fetch_rank_id("127.0.0.1", port, 1, config("k", 2)); });
  std::this_thread::sleep_for(200ms);  // the client is retrying its connect meanwhile
  auto server = RankBootstrapServer::listen("127.0.0.1", port, config("k", 2));
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  EXPECT_TRUE((*server)->serve(some_id()).is_ok());
  auto id = client.get();
  ASSERT_TRUE(id.is_ok()) << id.status().message();
  EXPECT_EQ(*id, some_id());
}

}  // namespace
}  // namespace pdserve::transfer
