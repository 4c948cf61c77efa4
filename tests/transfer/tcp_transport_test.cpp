#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "loopback_fixture.h"

namespace pdserve::transfer {
namespace {

using namespace testing;
constexpr uint64_t kMiB = 1 << 20;

// Random non-overlapping writes inside [base, base + span), from random source offsets.
std::vector<WriteOp> random_writes(std::mt19937_64& rng, uint64_t base, uint64_t span, uint64_t src_size) {
  std::vector<WriteOp> out;
  uint64_t pos = base;
  while (pos < base + span) {
    const int kind = rng() % 4;
    uint64_t len = kind == 0 ? 1 + rng() % 8 : kind == 1 ? 1 + rng() % 4096 : kind == 2 ? 1 + rng() % 65536 : 1 + rng() % (600 * 1024);
    len = std::min(len, base + span - pos);
    if (rng() % 3) out.push_back({kSrc, rng() % (src_size - len), kDst, pos, len});  // else leave a hole
    pos += len + rng() % 64;
  }
  return out;
}

class TcpTransportTest : public Loopback {};

TEST_F(TcpTransportTest, ManyRandomWritesFromManyRoomsLandByteForByte) {
  open();
  constexpr int kRooms = 16;
  std::vector<BatchRequest> batches;
  uint64_t total = 0;
  std::mt19937_64 rng(3);
  for (int r = 0; r < kRooms; ++r) {
    ASSERT_TRUE(b->grant({100u + r, kDst, r * kMiB, kMiB, 1u + r}).is_ok());
    BatchRequest req{100u + static_cast<RoomId>(r), 1u + r, random_writes(rng, r * kMiB, kMiB, src.size()), std::nullopt};
    for (auto& w : req.writes) expect_write(w), total += w.length;
    batches.push_back(std::move(req));
  }
  // One large write that the transport stripes over all four streams.
  ASSERT_TRUE(b->grant({999, kDst, 16 * kMiB, 16 * kMiB, 1}).is_ok());
  BatchRequest big{999, 1, {{kSrc, 3, kDst, 16 * kMiB, 16 * kMiB - 5}}, std::nullopt};
  expect_write(big.writes[0]);
  total += big.writes[0].length;
  batches.push_back(big);

  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<TransferBatch>> mine;
      for (size_t i = t; i < batches.size(); i += 4) {
        auto s = a->submit(peer, batches[i]);
        if (s.is_ok()) mine.push_back(*s);
      }
      for (auto& bt : mine) ok += bt->wait(in_seconds(30)).is_ok();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), static_cast<int>(batches.size()));
  EXPECT_TRUE(dst == expected) << "a byte landed wrong, or outside its write";

  MetricsSnapshot ma = a->metrics(), mb = b->metrics();
  EXPECT_EQ(ma.bytes_sent, total) << "bytes must equal the sum of write lengths";
  EXPECT_EQ(mb.bytes_received, total);
  EXPECT_EQ(ma.batches_ok, batches.size());
  EXPECT_EQ(ma.batches_failed, 0u);
  EXPECT_EQ(ma.queue_length, 0u);
  EXPECT_EQ(mb.writes_refused, 0u);
  EXPECT_GT(ma.busy_seconds, 0.0);
  EXPECT_GT(ma.gbps(), 0.0);
  // Throughput comes from measured time: bytes / busy time reproduces it exactly.
  EXPECT_DOUBLE_EQ(ma.gbps(), total / ma.busy_seconds / 1e9);
  EXPECT_LE(ma.latency_max_seconds, ma.busy_seconds);
}

TEST_F(TcpTransportTest, TinyWritesOnOneStreamAndSubmitChecksLocalBounds) {
  TcpConfig cfg = test_config();
  cfg.streams_per_peer = 1;
  open(cfg, 1 << 20, 1 << 20);
  ASSERT_TRUE(b->grant({1, kDst, 0, 4096, 1}).is_ok());
  BatchRequest req{1, 1, {}, std::nullopt};
  for (uint64_t i = 0; i < 4096; i += 2) req.writes.push_back({kSrc, i * 7, kDst, i, 1});
  for (auto& w : req.writes) expect_write(w);
  auto s = a->submit(peer, req);
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE((*s)->wait(in_seconds(30)).is_ok());
  EXPECT_TRUE(dst == expected);
  EXPECT_EQ(a->capabilities().max_streams, 1);
  // Sender-side refusals happen before anything is sent.
  EXPECT_EQ(a->submit(peer, {1, 1, {{kSrc, (1 << 20) - 1, kDst, 0, 2}}, std::nullopt}).status().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 0}}, std::nullopt}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a->submit(peer, {1, 1, {{7, 0, kDst, 0, 1}}, std::nullopt}).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(a->register_region({9, src.data(), 16, "gpu", true}).code(), ErrorCode::kUnsupported);
}

TEST_F(TcpTransportTest, NotificationArrivesOnlyAfterAllTheRoomsWritesLanded) {
  open();
  constexpr int kRooms = 8;
  std::mutex mu;
  std::map<RoomId, std::string> seen;
  std::map<RoomId, bool> complete_when_notified;
  b->set_callbacks({[&](RoomId room, const std::string& payload) {
                      const uint64_t base = (room - 1) * 2 * kMiB;
                      const bool complete = std::memcmp(dst.data() + base, expected.data() + base, 2 * kMiB) == 0;
                      std::lock_guard lk(mu);
                      seen[room] = payload;
                      complete_when_notified[room] = complete;
                    },
                    nullptr});
  std::mt19937_64 rng(11);
  std::vector<std::shared_ptr<TransferBatch>> all;
  for (RoomId room = 1; room <= kRooms; ++room) {
    const uint64_t base = (room - 1) * 2 * kMiB;
    ASSERT_TRUE(b->grant({room, kDst, base, 2 * kMiB, 3}).is_ok());
    // Three batches per room, submitted back to back; only the last one notifies.
    for (int part = 0; part < 3; ++part) {
      BatchRequest req{room, 3, random_writes(rng, base + part * (2 * kMiB / 3), 2 * kMiB / 3, src.size()), std::nullopt};
      if (part == 2) req.notify = "done:" + std::to_string(room);
      for (auto& w : req.writes) expect_write(w);
      auto s = a->submit(peer, req);
      ASSERT_TRUE(s.is_ok()) << s.status().to_string();
      all.push_back(*s);
    }
  }
  for (auto& bt : all) ASSERT_TRUE(bt->wait(in_seconds(30)).is_ok());
  std::lock_guard lk(mu);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kRooms));
  for (RoomId room = 1; room <= kRooms; ++room) {
    EXPECT_EQ(seen[room], "done:" + std::to_string(room));
    EXPECT_TRUE(complete_when_notified[room]) << "room " << room << " notified before its writes landed";
  }
  EXPECT_EQ(b->metrics().notifications, static_cast<uint64_t>(kRooms));
}

TEST_F(TcpTransportTest, WritesOutsideGrantsAreRefusedAndTouchNothing) {
  open(test_config(), 1 << 20, 1 << 20);
  std::mutex mu;
  std::vector<RoomId> failed;
  std::atomic<int> notified{0};
  b->set_callbacks({[&](RoomId, const std::string&) { ++notified; },
                    [&](RoomId room, const Status&) {
                      std::lock_guard lk(mu);
                      failed.push_back(room);
                    }});
  for (RoomId r = 1; r <= 7; ++r) ASSERT_TRUE(b->grant({r, kDst, (r - 1) * 4096, 4096, 1}).is_ok());
  ASSERT_TRUE(b->revoke(6).is_ok());
  const uint64_t end = dst.size();
  struct Case {
    const char* what;
    BatchRequest req;
  };
  std::vector<Case> cases = {
      {"range of another room", {1, 1, {{kSrc, 0, kDst, 4096, 16}}, std::nullopt}},
      {"runs past the grant", {2, 1, {{kSrc, 0, kDst, 4096 + 4000, 200}}, std::nullopt}},
      {"wrong generation", {3, 2, {{kSrc, 0, kDst, 2 * 4096, 16}}, std::nullopt}},
      {"unregistered region", {4, 1, {{kSrc, 0, 77, 3 * 4096, 16}}, std::nullopt}},
      {"past the region", {5, 1, {{kSrc, 0, kDst, end - 8, 16}}, std::nullopt}},
      {"revoked grant", {6, 1, {{kSrc, 0, kDst, 5 * 4096, 16}}, std::nullopt}},
      {"notification for a room never granted", {42, 1, {}, std::string("done")}},
  };
  for (auto& c : cases) {
    auto s = a->submit(peer, c.req);
    ASSERT_TRUE(s.is_ok()) << c.what;
    Status st = (*s)->wait(in_seconds(30));
    EXPECT_FALSE(st.is_ok()) << c.what;
    EXPECT_NE(st.code(), ErrorCode::kDeadlineExceeded) << c.what;
  }
  EXPECT_TRUE(dst == expected) << "a refused write changed the destination";
  EXPECT_EQ(notified.load(), 0);
  {
    std::lock_guard lk(mu);
    std::sort(failed.begin(), failed.end());
    EXPECT_EQ(failed, (std::vector<RoomId>{1, 2, 3, 4, 5})) << "granted rooms fail once; unknown rooms are only logged";
  }
  // A failed room stays failed, even for a write it was granted.
  auto again = a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 16}}, std::nullopt});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ((*again)->wait(in_seconds(30)).code(), ErrorCode::kAborted);
  // The connection survives refusals: a good room still gets through.
  auto good = a->submit(peer, {7, 1, {{kSrc, 5, kDst, 6 * 4096, 4096}}, std::string("ok")});
  ASSERT_TRUE(good.is_ok());
  EXPECT_TRUE((*good)->wait(in_seconds(30)).is_ok());
  expect_write({kSrc, 5, kDst, 6 * 4096, 4096});
  EXPECT_TRUE(dst == expected);
  EXPECT_EQ(notified.load(), 1);
  EXPECT_EQ(b->metrics().writes_refused, 8u);
  EXPECT_EQ(a->metrics().batches_failed, 8u);
  EXPECT_EQ(a->metrics().batches_ok, 1u);
}

TEST_F(TcpTransportTest, FuzzedFramingDropsTheConnectionWithoutWriting) {
  open(test_config(), 1 << 20, 1 << 20);
  ASSERT_TRUE(b->grant({1, kDst, 0, 4096, 1}).is_ok());
  const uint16_t port = b->local_address().port;
  std::mt19937_64 rng(5);
  std::vector<uint8_t> payload(64, 0x11);
  for (int i = 0; i < 60; ++i) {
    int fd = raw_connect(port);
    ASSERT_GE(fd, 0);
    wire::FrameHeader hello;
    hello.type = wire::FrameType::kHello;
    ASSERT_TRUE(raw_send_header(fd, hello));
    uint8_t ack[wire::kHeaderBytes];
    ASSERT_EQ(::recv(fd, ack, sizeof(ack), MSG_WAITALL), static_cast<ssize_t>(sizeof(ack)));
    // A write the receiver would accept, with one header byte changed.
    wire::FrameHeader w;
    w.type = wire::FrameType::kWrite;
    w.room = 1;
    w.generation = 1;
    w.region = kDst;
    w.seq = 1;
    w.batch = 1;
    w.offset = 0;
    w.length = payload.size();
    uint8_t buf[wire::kHeaderBytes];
    wire::encode_header(w, buf);
    buf[rng() % sizeof(buf)] ^= static_cast<uint8_t>(1 + rng() % 255);
    raw_send(fd, buf, sizeof(buf));
    raw_send(fd, payload.data(), payload.size());
    EXPECT_TRUE(raw_dropped(fd)) << "iteration " << i;
    ::close(fd);
  }
  // A valid header with a skipped sequence number, and garbage instead of a hello.
  {
    int fd = raw_connect(port);
    wire::FrameHeader hello;
    hello.type = wire::FrameType::kHello;
    raw_send_header(fd, hello);
    wire::FrameHeader end;
    end.type = wire::FrameType::kBatchEnd;
    end.seq = 5;
    raw_send_header(fd, end);
    uint8_t ack[wire::kHeaderBytes];
    ::recv(fd, ack, sizeof(ack), MSG_WAITALL);
    EXPECT_TRUE(raw_dropped(fd));
    ::close(fd);
    fd = raw_connect(port);
    std::string junk(200, 'x');
    raw_send(fd, junk.data(), junk.size());
    EXPECT_TRUE(raw_dropped(fd));
    ::close(fd);
  }
  EXPECT_TRUE(dst == expected);
  EXPECT_GE(b->metrics().frames_rejected, 61u);
  // The receiver still serves well-behaved peers.
  auto s = a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 4096}}, std::nullopt});
  ASSERT_TRUE(s.is_ok());
  EXPECT_TRUE((*s)->wait(in_seconds(30)).is_ok());
}

// A peer that completes the hello and then misbehaves: `reads` bytes and closes, or stalls.
class FakePeer {
 public:
  FakePeer(int streams, int64_t read_then_close) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ::bind(lfd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(lfd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    th_ = std::thread([=, this] {
      std::vector<int> fds;
      for (int i = 0; i < streams; ++i) {
        int fd = ::accept(lfd_, nullptr, nullptr);
        uint8_t buf[wire::kHeaderBytes];
        ::recv(fd, buf, sizeof(buf), MSG_WAITALL);
        wire::FrameHeader ack;
        ack.type = wire::FrameType::kHelloAck;
        ack.offset = 1 << 30;
        raw_send_header(fd, ack);
        fds.push_back(fd);
      }
      if (read_then_close >= 0) {
        std::vector<uint8_t> sink(read_then_close + 1);
        ::recv(fds[0], sink.data(), read_then_close, MSG_WAITALL);
        for (int fd : fds) ::close(fd);  // what the kernel does when the process is killed
      } else {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return done_; });  // stall: never read, never ack
        for (int fd : fds) ::close(fd);
      }
    });
  }
  ~FakePeer() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    th_.join();
    ::close(lfd_);
  }
  uint16_t port() const { return port_; }

 private:
  int lfd_;
  uint16_t port_;
  std::thread th_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

TEST_F(TcpTransportTest, PeerKilledMidTransferFailsTheBatchWithUnavailable) {
  open();
  FakePeer fake(4, 1 << 20);
  auto p = a->open_peer({"127.0.0.1", fake.port()});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  auto s = a->submit(*p, {1, 1, {{kSrc, 0, kDst, 0, 30 * kMiB}}, std::string("done")});
  ASSERT_TRUE(s.is_ok());
  Status st = (*s)->wait(in_seconds(20));
  EXPECT_EQ(st.code(), ErrorCode::kUnavailable) << st.to_string();
  EXPECT_EQ(a->submit(*p, {1, 1, {{kSrc, 0, kDst, 0, 16}}, std::nullopt}).status().code(), ErrorCode::kUnavailable)
      << "a failed session refuses new work";
  EXPECT_EQ(a->metrics().batches_failed, 1u);
  EXPECT_EQ(a->metrics().queue_length, 0u);
}

TEST_F(TcpTransportTest, StalledPeerHitsTheDeadlineAndCloseNeverHangs) {
  TcpConfig cfg = test_config();
  cfg.max_outstanding_batches = 2;
  open(cfg);
  FakePeer fake(4, -1);
  auto p = a->open_peer({"127.0.0.1", fake.port()});
  ASSERT_TRUE(p.is_ok());
  auto s1 = a->submit(*p, {1, 1, {{kSrc, 0, kDst, 0, 30 * kMiB}}, std::nullopt});
  auto s2 = a->submit(*p, {2, 1, {{kSrc, 0, kDst, 0, 16}}, std::nullopt});
  ASSERT_TRUE(s1.is_ok() && s2.is_ok());
  EXPECT_EQ(a->submit(*p, {3, 1, {{kSrc, 0, kDst, 0, 16}}, std::nullopt}).status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(a->metrics().queue_length, 2u);
  EXPECT_EQ((*s1)->wait(Clock::now() + std::chrono::milliseconds(200)).code(), ErrorCode::kDeadlineExceeded);
  EXPECT_FALSE((*s1)->poll().has_value());
  ASSERT_TRUE(a->close_peer(*p).is_ok());  // unblocks a send stuck on a full socket
  ASSERT_TRUE((*s1)->poll().has_value());
  EXPECT_EQ((*s1)->poll()->code(), ErrorCode::kUnavailable);
  EXPECT_EQ((*s2)->poll()->code(), ErrorCode::kUnavailable);
}

TEST_F(TcpTransportTest, PeersAreOpenedOnceAndUnreachableOnesFailFast) {
  open();
  auto again = a->open_peer(b->local_address());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, peer);
  auto none = make_tcp_transport(test_config());
  ASSERT_TRUE(none.is_ok());
  const PeerAddress gone = (*none)->local_address();
  (*none)->shutdown();
  auto r = a->open_peer(gone);
  EXPECT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable) << r.status().to_string();
}

TEST_F(TcpTransportTest, ShutdownWithBatchesInFlightEndsThem) {
  open();
  ASSERT_TRUE(b->grant({1, kDst, 0, 32 * kMiB, 1}).is_ok());
  std::vector<std::shared_ptr<TransferBatch>> all;
  for (int i = 0; i < 8; ++i) {
    auto s = a->submit(peer, {1, 1, {{kSrc, 0, kDst, 0, 32 * kMiB}}, std::nullopt});
    if (s.is_ok()) all.push_back(*s);
  }
  b->shutdown();
  a->shutdown();
  for (auto& bt : all) EXPECT_TRUE(bt->poll().has_value()) << "a batch outlived shutdown unresolved";
}

}  // namespace
}  // namespace pdserve::transfer
