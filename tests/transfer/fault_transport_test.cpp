#include <gtest/gtest.h>

#include <atomic>

#include "loopback_fixture.h"
#include "pdserve/transfer/fault_transport.h"
#include "pdserve/transfer/wire.h"

namespace pdserve::transfer {
namespace {

using namespace testing;

class FaultTransportTest : public Loopback {
 protected:
  void SetUp() override {
    open(test_config(), 4 << 20, 4 << 20, [this](std::unique_ptr<Transport> inner) {
      auto f = std::make_unique<FaultInjectingTransport>(std::move(inner));
      fault = f.get();
      return std::unique_ptr<Transport>(std::move(f));
    });
    b->set_callbacks({[this](RoomId, const std::string&) { ++notified; }, nullptr});
    ASSERT_TRUE(b->grant({1, kDst, 0, 1 << 20, 1}).is_ok());
  }
  // The caller-side check issue 16 adds: a checksum over the run, compared after landing.
  static uint32_t checksum(const std::vector<uint8_t>& v, uint64_t off, uint64_t n) { return wire::fnv1a32(v.data() + off, n); }

  FaultInjectingTransport* fault = nullptr;
  std::atomic<int> notified{0};
};

TEST_F(FaultTransportTest, CapabilitiesNameTheWrappedTransport) {
  EXPECT_EQ(a->capabilities().name, "fault(tcp)");
  EXPECT_TRUE(a->capabilities().zero_copy);
}

TEST_F(FaultTransportTest, DroppedWriteEndsInADeadlineAndNoNotification) {
  fault->set_plan({.drop_next_write = true});
  auto s = a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 4096}, {kSrc, 8192, kDst, 8192, 4096}}, std::string("done")});
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ((*s)->wait(Clock::now() + std::chrono::milliseconds(300)).code(), ErrorCode::kDeadlineExceeded);
  EXPECT_FALSE((*s)->poll().has_value());
  EXPECT_EQ(notified.load(), 0);
  // Only the first write was lost.
  EXPECT_EQ(dst[0], kSentinel);
  // The next batch is not affected.
  auto ok = a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 4096}}, std::string("done")});
  ASSERT_TRUE(ok.is_ok());
  EXPECT_TRUE((*ok)->wait(in_seconds(30)).is_ok());
  EXPECT_EQ(notified.load(), 1);
}

TEST_F(FaultTransportTest, CorruptedByteArrivesAndTheCallersChecksumCatchesIt) {
  fault->set_plan({.corrupt_byte = 1000});
  const std::vector<uint8_t> src_before = src;
  auto s = a->submit(peer, {1, 1, {{kSrc, 4096, kDst, 0, 65536}}, std::nullopt});
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE((*s)->wait(in_seconds(30)).is_ok()) << "the transport cannot see the flip: that is issue 16's job";
  EXPECT_TRUE(src == src_before) << "the source must not be touched";
  EXPECT_NE(checksum(dst, 0, 65536), checksum(src, 4096, 65536));
  int differing = 0;
  for (int i = 0; i < 65536; ++i) differing += dst[i] != src[4096 + i];
  EXPECT_EQ(differing, 1);
  EXPECT_NE(dst[1000], src[4096 + 1000]);
}

TEST_F(FaultTransportTest, DisconnectAfterNBytesFailsWithUnavailable) {
  fault->set_plan({.disconnect_after_bytes = 10000});
  auto first = a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 6000}}, std::nullopt});
  ASSERT_TRUE(first.is_ok());
  EXPECT_TRUE((*first)->wait(in_seconds(30)).is_ok());
  auto cut = a->submit(peer, {1, 1, {{kSrc, 6000, kDst, 6000, 8000}}, std::string("done")});
  ASSERT_TRUE(cut.is_ok());
  EXPECT_EQ((*cut)->wait(in_seconds(30)).code(), ErrorCode::kUnavailable);
  // Exactly 10000 bytes made it; nothing after the cut.
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 10000, dst.begin()));
  EXPECT_EQ(dst[10000], kSentinel);
  EXPECT_EQ(notified.load(), 0);
  EXPECT_EQ(a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 16}}, std::nullopt}).status().code(), ErrorCode::kUnavailable);
  // Re-opening the peer gives a fresh session.
  auto again = a->open_peer(b->local_address());
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  auto s = a->submit(*again, {1, 1, {{kSrc, 0, kDst, 0, 16}}, std::nullopt});
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE((*s)->wait(in_seconds(30)).is_ok());
}

TEST_F(FaultTransportTest, DelayedBatchMissesAShortDeadlineThenCompletes) {
  fault->set_plan({.delay = std::chrono::milliseconds(300)});
  auto s = a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 4096}}, std::string("done")});
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ((*s)->wait(Clock::now() + std::chrono::milliseconds(1)).code(), ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE((*s)->wait(in_seconds(30)).is_ok());
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 4096, dst.begin()));
  EXPECT_EQ(notified.load(), 1);
}

TEST_F(FaultTransportTest, ScratchRegionIdsAreReserved) {
  EXPECT_FALSE(a->register_region({FaultInjectingTransport::kScratchRegionBase, src.data(), 16, "x"}).is_ok());
}

}  // namespace
}  // namespace pdserve::transfer
