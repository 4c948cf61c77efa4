#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "pdserve/transfer/wire.h"

namespace pdserve::transfer::wire {
namespace {

FrameHeader sample() {
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.region = 7;
  h.generation = 3;
  h.room = 0x123456789abcdefull;
  h.batch = 42;
  h.seq = 9;
  h.offset = 1ull << 40;
  h.length = 4096;
  h.aux = 0;
  return h;
}

TEST(Wire, RoundTripKeepsEveryField) {
  uint8_t buf[kHeaderBytes];
  encode_header(sample(), buf);
  auto d = decode_header(buf, Limits{});
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->type, FrameType::kWrite);
  EXPECT_EQ(d->region, 7u);
  EXPECT_EQ(d->generation, 3u);
  EXPECT_EQ(d->room, 0x123456789abcdefull);
  EXPECT_EQ(d->batch, 42u);
  EXPECT_EQ(d->seq, 9u);
  EXPECT_EQ(d->offset, 1ull << 40);
  EXPECT_EQ(d->length, 4096u);
  EXPECT_EQ(std::memcmp(buf, "PDST", 4), 0);  // magic reads as text in a packet dump
}

TEST(Wire, EverySingleBitFlipIsRejected) {
  uint8_t good[kHeaderBytes];
  encode_header(sample(), good);
  for (size_t i = 0; i < kHeaderBytes; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      uint8_t buf[kHeaderBytes];
      std::memcpy(buf, good, sizeof(buf));
      buf[i] ^= static_cast<uint8_t>(1 << bit);
      auto d = decode_header(buf, Limits{});
      ASSERT_FALSE(d.is_ok()) << "byte " << i << " bit " << bit;
      EXPECT_EQ(d.status().code(), ErrorCode::kDataLoss);
    }
  }
}

TEST(Wire, LengthsAreCheckedPerType) {
  Limits lim;
  lim.max_write_bytes = 1 << 20;
  lim.max_notify_bytes = 100;
  uint8_t buf[kHeaderBytes];
  auto check = [&](FrameHeader h) {
    encode_header(h, buf);
    return decode_header(buf, lim).is_ok();
  };
  FrameHeader h = sample();
  h.length = 0;
  EXPECT_FALSE(check(h)) << "empty write";
  h.length = (1 << 20) + 1;
  EXPECT_FALSE(check(h)) << "write over the limit";
  h.length = 16;
  h.offset = UINT64_MAX - 8;
  EXPECT_FALSE(check(h)) << "offset + length wraps";
  h = sample();
  h.type = FrameType::kNotify;
  h.length = 101;
  EXPECT_FALSE(check(h)) << "notification over the limit";
  h.length = 100;
  EXPECT_TRUE(check(h));
  h.type = FrameType::kBatchEnd;
  h.length = 1;
  EXPECT_FALSE(check(h)) << "payload on a control message";
  h = sample();
  h.type = FrameType::kAck;
  h.length = 5;
  h.aux = 0;
  EXPECT_FALSE(check(h)) << "ok ack with a message";
  h.aux = 999;
  EXPECT_FALSE(check(h)) << "unknown status";
  h = sample();
  h.flags = kFlagNotifyAck;
  EXPECT_FALSE(check(h)) << "notify-ack flag on a write";
}

TEST(Wire, ReservedBytesAndUnknownTypesAreRejectedEvenWithAValidChecksum) {
  uint8_t buf[kHeaderBytes];
  auto reseal = [&] {
    const uint32_t c = fnv1a32(buf, 76);
    for (int i = 0; i < 4; ++i) buf[76 + i] = static_cast<uint8_t>(c >> (8 * i));
  };
  encode_header(sample(), buf);
  buf[20] = 1;
  reseal();
  EXPECT_FALSE(decode_header(buf, Limits{}).is_ok());
  encode_header(sample(), buf);
  buf[6] = 77;  // type
  reseal();
  EXPECT_FALSE(decode_header(buf, Limits{}).is_ok());
  encode_header(sample(), buf);
  buf[4] = 2;  // version
  reseal();
  auto d = decode_header(buf, Limits{});
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("version"), std::string::npos);
}

TEST(Wire, RandomBytesNeverDecodeIntoAnOversizedWrite) {
  std::mt19937_64 rng(1);
  Limits lim;
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    uint8_t buf[kHeaderBytes];
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    if (i % 2) std::memcpy(buf, "PDST\x01\x00", 6);  // get past the magic half the time
    auto d = decode_header(buf, lim);
    if (d.is_ok()) {
      ++accepted;
      EXPECT_LE(d->length, lim.max_write_bytes);
    }
  }
  EXPECT_EQ(accepted, 0);  // the header checksum stops random bytes
}

}  // namespace
}  // namespace pdserve::transfer::wire
