// The transfer plane with a cluster secret: the hello is a challenge-response both ways, and a
// peer without the secret (or with another one) is refused before any write frame is read.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "loopback_fixture.h"

namespace pdserve::transfer {
namespace {

using namespace testing;

struct Pair {
  std::vector<uint8_t> src = std::vector<uint8_t>(1 << 16, 0x5a), dst = std::vector<uint8_t>(1 << 16, kSentinel);
  std::unique_ptr<Transport> a, b;
  Pair(const std::string& sender_secret, const std::string& receiver_secret) {
    TcpConfig ca = test_config(), cb = test_config();
    ca.secret = sender_secret;
    cb.secret = receiver_secret;
    a = std::move(make_tcp_transport(ca)).value();
    b = std::move(make_tcp_transport(cb)).value();
    EXPECT_TRUE(a->register_region({kSrc, src.data(), src.size(), "src"}).is_ok());
    EXPECT_TRUE(b->register_region({kDst, dst.data(), dst.size(), "dst"}).is_ok());
  }
  ~Pair() {
    a->shutdown();
    b->shutdown();
  }
  Result<PeerId> open() { return a->open_peer(b->local_address()); }
};

// The receiver counts a refused hello on its own thread, possibly after the sender already
// saw the refusal: poll briefly.
bool rejected_eventually(const Transport& t) {
  for (int i = 0; i < 200; ++i) {
    if (t.metrics().frames_rejected >= 1u) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(TransferAuth, SameSecretOnBothSidesMovesTheBytes) {
  Pair p("correct horse battery staple", "correct horse battery staple");
  auto peer = p.open();
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  ASSERT_TRUE(p.b->grant({7, kDst, 0, 4096, 1}).is_ok());
  auto batch = p.a->submit(*peer, {7, 1, {{kSrc, 0, kDst, 0, 4096}}, std::string("done")});
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  EXPECT_TRUE((*batch)->wait(in_seconds(10)).is_ok());
  EXPECT_EQ(p.dst[0], 0x5a);
  EXPECT_EQ(p.dst[4095], 0x5a);
  EXPECT_EQ(p.dst[4096], kSentinel);
}

TEST(TransferAuth, PeerWithoutTheSecretIsRefused) {
  Pair p("", "the secret");
  auto peer = p.open();
  ASSERT_FALSE(peer.is_ok());
  EXPECT_NE(peer.status().message().find("authentication required"), std::string::npos) << peer.status().to_string();
  EXPECT_TRUE(rejected_eventually(*p.b)) << "the receiver never counted the refused hello";
}

TEST(TransferAuth, WrongSecretIsRefusedBothWays) {
  Pair p("secret one", "secret two");
  auto peer = p.open();
  ASSERT_FALSE(peer.is_ok());
  // The sender checks the receiver's proof first: it refuses to talk to an impostor.
  EXPECT_NE(peer.status().message().find("different cluster secret"), std::string::npos) << peer.status().to_string();
}

TEST(TransferAuth, ReceiverWithoutTheSecretIsRefusedBySender) {
  Pair p("the secret", "");
  auto peer = p.open();
  ASSERT_FALSE(peer.is_ok());
  EXPECT_NE(peer.status().message().find("does not authenticate"), std::string::npos) << peer.status().to_string();
}

// A hand-written client: plain hello, then a write the grants would allow. The receiver
// answers with a refusal and drops the connection; not a byte of the write lands.
TEST(TransferAuth, UnauthenticatedWriteIsNeverRead) {
  Pair p("", "the secret");
  ASSERT_TRUE(p.b->grant({1, kDst, 0, 4096, 1}).is_ok());
  int fd = raw_connect(p.b->local_address().port);
  ASSERT_GE(fd, 0);
  wire::FrameHeader hello;
  hello.type = wire::FrameType::kHello;
  ASSERT_TRUE(raw_send_header(fd, hello));
  wire::FrameHeader w;
  w.type = wire::FrameType::kWrite;
  w.room = 1;
  w.generation = 1;
  w.region = kDst;
  w.seq = 1;
  w.batch = 1;
  w.length = 64;
  raw_send_header(fd, w);
  std::vector<uint8_t> payload(64, 0x11);
  raw_send(fd, payload.data(), payload.size());
  uint8_t answer[wire::kHeaderBytes];
  // The refusal comes first; the unread write may turn the close into a reset, which can
  // overtake it, so only a refusal that did arrive is checked.
  if (::recv(fd, answer, sizeof(answer), MSG_WAITALL) == static_cast<ssize_t>(sizeof(answer))) {
    auto h = wire::decode_header(answer, wire::Limits{});
    ASSERT_TRUE(h.is_ok());
    EXPECT_EQ(h->type, wire::FrameType::kAuth);
    EXPECT_NE(h->aux, 0u);
    EXPECT_TRUE(raw_dropped(fd));
  }
  ::close(fd);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(p.dst[i], kSentinel) << "byte " << i << " was written";
  EXPECT_EQ(p.b->metrics().bytes_received, 0u);
}

// A replayed or forged proof: right hello, then an auth message with a made-up MAC.
TEST(TransferAuth, ForgedProofIsRefused) {
  Pair p("", "the secret");
  int fd = raw_connect(p.b->local_address().port);
  ASSERT_GE(fd, 0);
  wire::FrameHeader hello;
  hello.type = wire::FrameType::kHello;
  hello.flags = wire::kFlagAuth;
  hello.length = 32;
  ASSERT_TRUE(raw_send_header(fd, hello));
  std::string nonce(32, 'n');
  raw_send(fd, nonce.data(), nonce.size());
  uint8_t ack[wire::kHeaderBytes];
  ASSERT_EQ(::recv(fd, ack, sizeof(ack), MSG_WAITALL), static_cast<ssize_t>(sizeof(ack)));
  auto h = wire::decode_header(ack, wire::Limits{});
  ASSERT_TRUE(h.is_ok());
  ASSERT_EQ(h->type, wire::FrameType::kHelloAck);
  std::string challenge(h->length, '\0');
  ASSERT_EQ(::recv(fd, challenge.data(), challenge.size(), MSG_WAITALL), static_cast<ssize_t>(challenge.size()));
  wire::FrameHeader proof;
  proof.type = wire::FrameType::kAuth;
  proof.seq = 1;
  proof.length = 32;
  raw_send_header(fd, proof);
  std::string forged(32, 'f');
  raw_send(fd, forged.data(), forged.size());
  uint8_t verdict[wire::kHeaderBytes];
  ASSERT_EQ(::recv(fd, verdict, sizeof(verdict), MSG_WAITALL), static_cast<ssize_t>(sizeof(verdict)));
  auto v = wire::decode_header(verdict, wire::Limits{});
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->type, wire::FrameType::kAuth);
  EXPECT_NE(v->aux, 0u);
  EXPECT_TRUE(raw_dropped(fd));
  ::close(fd);
}

TEST(TransferAuth, WireAllowsTheAuthFlagOnlyOnHellos) {
  uint8_t buf[wire::kHeaderBytes];
  wire::FrameHeader h;
  h.type = wire::FrameType::kHello;
  h.flags = wire::kFlagAuth;
  h.length = 32;
  wire::encode_header(h, buf);
  EXPECT_TRUE(wire::decode_header(buf, wire::Limits{}).is_ok());
  h.length = wire::kMaxHandshakeBytes + 1;
  wire::encode_header(h, buf);
  EXPECT_FALSE(wire::decode_header(buf, wire::Limits{}).is_ok());
  h.type = wire::FrameType::kWrite;
  h.length = 8;
  wire::encode_header(h, buf);
  EXPECT_FALSE(wire::decode_header(buf, wire::Limits{}).is_ok());
}

}  // namespace
}  // namespace pdserve::transfer
