// Two TCP transports on loopback: `a` sends from `src`, `b` receives into `dst`.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "pdserve/transfer/tcp_transport.h"
#include "pdserve/transfer/wire.h"

namespace pdserve::transfer::testing {

constexpr RegionId kSrc = 1, kDst = 2;
constexpr uint8_t kSentinel = 0xEE;

inline TcpConfig test_config() {
  TcpConfig c;
  c.streams_per_peer = 4;
  c.connect_timeout = std::chrono::milliseconds(2000);
  c.io_timeout = std::chrono::milliseconds(5000);
  return c;
}

inline Clock::time_point in_seconds(int s) { return Clock::now() + std::chrono::seconds(s); }

class Loopback : public ::testing::Test {
 protected:
  // wrap, when given, decorates the sender before any region is registered.
  using Wrap = std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport>)>;
  void open(TcpConfig cfg = test_config(), size_t src_bytes = 32 << 20, size_t dst_bytes = 32 << 20, Wrap wrap = nullptr) {
    src.resize(src_bytes);
    std::mt19937_64 rng(7);
    for (auto& x : src) x = static_cast<uint8_t>(rng());
    dst.assign(dst_bytes, kSentinel);
    expected = dst;
    auto ra = make_tcp_transport(cfg);
    auto rb = make_tcp_transport(cfg);
    ASSERT_TRUE(ra.is_ok() && rb.is_ok());
    a = std::move(ra).value();
    if (wrap) a = wrap(std::move(a));
    b = std::move(rb).value();
    ASSERT_TRUE(a->register_region({kSrc, src.data(), src.size(), "src"}).is_ok());
    ASSERT_TRUE(b->register_region({kDst, dst.data(), dst.size(), "dst"}).is_ok());
    auto p = a->open_peer(b->local_address());
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    peer = *p;
  }
  void TearDown() override {
    if (a) a->shutdown();
    if (b) b->shutdown();
  }
  // Records what a write should leave in dst.
  void expect_write(const WriteOp& w) { std::memcpy(expected.data() + w.remote_offset, src.data() + w.local_offset, w.length); }

  std::vector<uint8_t> src, dst, expected;
  std::unique_ptr<Transport> a, b;
  PeerId peer = 0;
};

// A hand-driven client socket for framing tests.
inline int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{5, 0};  // a test that expects a drop fails instead of hanging
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

inline bool raw_send(int fd, const void* p, size_t n) { return ::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n); }

inline bool raw_send_header(int fd, const wire::FrameHeader& h) {
  uint8_t buf[wire::kHeaderBytes];
  wire::encode_header(h, buf);
  return raw_send(fd, buf, sizeof(buf));
}

// True when the other side closed the connection (reads until EOF or error).
inline bool raw_dropped(int fd) {
  uint8_t buf[256];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

}  // namespace pdserve::transfer::testing
