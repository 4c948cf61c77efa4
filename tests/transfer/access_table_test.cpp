#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "pdserve/transfer/access_table.h"

namespace pdserve::transfer {
namespace {

class AccessTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(t.register_region({1, mem.data(), mem.size(), "pages"}).is_ok());
    ASSERT_TRUE(t.grant({10, 1, 4096, 4096, 5}).is_ok());  // room 10: [4096, 8192) gen 5
  }
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 16);
  AccessTable t;
};

TEST_F(AccessTableTest, AdmitsOnlyInsideTheRoomsGrantUnderItsGeneration) {
  auto ok = t.admit_write(10, 5, 1, 4096, 4096);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok->data(), mem.data() + 4096);
  EXPECT_TRUE(t.admit_write(10, 5, 1, 8100, 100).status().code() == ErrorCode::kInvalidArgument) << "runs past the grant";
  EXPECT_FALSE(t.admit_write(10, 5, 1, 4000, 100).is_ok()) << "starts before the grant";
  EXPECT_FALSE(t.admit_write(10, 4, 1, 4096, 10).is_ok()) << "stale generation";
  EXPECT_FALSE(t.admit_write(11, 5, 1, 4096, 10).is_ok()) << "another room";
  EXPECT_EQ(t.admit_write(10, 5, 2, 4096, 10).status().code(), ErrorCode::kNotFound) << "unregistered region";
  EXPECT_EQ(t.admit_write(10, 5, 1, 1 << 16, 1).status().code(), ErrorCode::kOutOfRange) << "past the region";
  EXPECT_EQ(t.admit_write(10, 5, 1, UINT64_MAX - 1, 4).status().code(), ErrorCode::kOutOfRange) << "wrapping offset";
  EXPECT_FALSE(t.admit_write(10, 5, 1, 4096, 0).is_ok()) << "empty write";
}

TEST_F(AccessTableTest, AdjacentGrantsOfOneRoomAdmitOneRunAcrossThem) {
  ASSERT_TRUE(t.grant({10, 1, 8192, 4096, 5}).is_ok());
  EXPECT_TRUE(t.admit_write(10, 5, 1, 4096, 8192).is_ok());
  ASSERT_TRUE(t.grant({10, 1, 16384, 4096, 5}).is_ok());  // a gap at [12288, 16384)
  EXPECT_FALSE(t.admit_write(10, 5, 1, 4096, 16384).is_ok());
  ASSERT_TRUE(t.grant({10, 1, 12288, 4096, 6}).is_ok());  // fills the gap, other generation
  EXPECT_FALSE(t.admit_write(10, 5, 1, 4096, 16384).is_ok());
}

TEST_F(AccessTableTest, GrantsOfDifferentRoomsNeverOverlap) {
  EXPECT_FALSE(t.grant({11, 1, 8191, 10, 1}).is_ok());
  EXPECT_FALSE(t.grant({11, 1, 0, 4097, 1}).is_ok());
  EXPECT_FALSE(t.grant({11, 1, 0, 1 << 20, 1}).is_ok()) << "outside the region";
  EXPECT_FALSE(t.grant({11, 9, 0, 16, 1}).is_ok()) << "unregistered region";
  EXPECT_TRUE(t.grant({11, 1, 8192, 10, 1}).is_ok());
  EXPECT_TRUE(t.grant({11, 1, 0, 4096, 1}).is_ok());
}

TEST_F(AccessTableTest, RevokeAndFailureRefuseLaterWrites) {
  EXPECT_TRUE(t.admit_notify(10, 5).is_ok());
  EXPECT_FALSE(t.admit_notify(10, 4).is_ok());
  EXPECT_TRUE(t.fail_room(10));
  EXPECT_FALSE(t.fail_room(10)) << "reported once";
  EXPECT_EQ(t.admit_write(10, 5, 1, 4096, 10).status().code(), ErrorCode::kAborted);
  EXPECT_FALSE(t.admit_notify(10, 5).is_ok());
  ASSERT_TRUE(t.revoke(10).is_ok());
  EXPECT_FALSE(t.admit_write(10, 5, 1, 4096, 10).is_ok());
  EXPECT_FALSE(t.admit_notify(10, 5).is_ok());
  EXPECT_TRUE(t.revoke(10).is_ok()) << "idempotent";
  EXPECT_FALSE(t.fail_room(99)) << "unknown rooms are not tracked";
  ASSERT_TRUE(t.grant({10, 1, 4096, 4096, 6}).is_ok()) << "the range is free again";
  EXPECT_TRUE(t.admit_write(10, 6, 1, 4096, 10).is_ok());
}

TEST_F(AccessTableTest, RevokeWaitsForAWriteInProgress) {
  auto pin = t.admit_write(10, 5, 1, 4096, 10);
  ASSERT_TRUE(pin.is_ok());
  std::atomic<bool> revoked{false};
  std::thread th([&] {
    (void)t.revoke(10);
    revoked = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(revoked.load()) << "revoke returned while a write could still land";
  pin->release();
  th.join();
  EXPECT_TRUE(revoked.load());
}

TEST_F(AccessTableTest, UnregisterIsRefusedWhileGrantsExist) {
  EXPECT_FALSE(t.unregister_region(1).is_ok());
  ASSERT_TRUE(t.revoke(10).is_ok());
  EXPECT_TRUE(t.unregister_region(1).is_ok());
  EXPECT_FALSE(t.pin_source(1, 0, 1).is_ok());
}

TEST_F(AccessTableTest, SourcePinsAreBoundsChecked) {
  EXPECT_TRUE(t.pin_source(1, 0, mem.size()).is_ok());
  EXPECT_FALSE(t.pin_source(1, 1, mem.size()).is_ok());
  EXPECT_FALSE(t.pin_source(1, UINT64_MAX, 2).is_ok());
  EXPECT_FALSE(t.pin_source(3, 0, 1).is_ok());
}

TEST_F(AccessTableTest, BatchSourcePinsRefuseBadWritesAndReleaseWhatTheyTook) {
  BatchRequest req;
  req.room = 10;
  req.writes = {{1, 0, 1, 0, 4096}, {1, 4096, 1, 8192, 4096}};
  auto pins = t.pin_sources(req);
  ASSERT_TRUE(pins.is_ok()) << pins.status().message();
  ASSERT_EQ(pins->size(), 2u);
  EXPECT_EQ((*pins)[1].data(), mem.data() + 4096);
  pins->clear();

  req.writes.push_back({1, 0, 1, 0, 0});
  EXPECT_EQ(t.pin_sources(req).status().code(), ErrorCode::kInvalidArgument) << "empty write";
  req.writes.back() = {1, 0, 1, UINT64_MAX - 10, 100};
  EXPECT_EQ(t.pin_sources(req).status().code(), ErrorCode::kInvalidArgument) << "remote range wraps";
  req.writes.back() = {1, 1 << 16, 1, 0, 1};
  EXPECT_EQ(t.pin_sources(req).status().code(), ErrorCode::kOutOfRange) << "source past the region";
  // The refused batches pinned their first writes; had they kept them, this would hang.
  ASSERT_TRUE(t.revoke(10).is_ok());
  EXPECT_TRUE(t.unregister_region(1).is_ok());
}

}  // namespace
}  // namespace pdserve::transfer
