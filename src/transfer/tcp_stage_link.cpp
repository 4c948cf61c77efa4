// Pipeline activations between nodes over TCP for the CPU backend (tcp_stage_link.h).
#include "pdserve/transfer/tcp_stage_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "socket_io.h"

namespace pdserve::transfer {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kOpening = 16 + 4 + 4 + 1;  // token, boundary u32, rank u32, side u8
constexpr size_t kHeader = 4 + 4 + 8;        // code i32, text length u32, float count u64
constexpr uint32_t kMaxText = 1u << 16;

using net::recv_bytes;
using net::send_bytes;

void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>((v >> (8 * i)) & 0xff);
}

uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// As the TCP collectives: no timeouts in steady state (a stage waits as long as the one
// before it computes); a vanished process is end-of-stream, a vanished host TCP_USER_TIMEOUT.
void steady(int fd) {
  (void)net::tune(fd, std::chrono::milliseconds(30000));
  (void)net::set_recv_timeout(fd, std::chrono::milliseconds(0));
  timeval none{0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
}

class TcpStageChannel final : public StageChannel {
 public:
  TcpStageChannel(int fd, int stage, int peer, int stages) : fd_(fd), stage_(stage), peer_(peer), stages_(stages) {}
  ~TcpStageChannel() override { ::close(fd_); }
  int stage() const override { return stage_; }
  int num_stages() const override { return stages_; }

  Status send(int to, const float* data, int64_t n) override {
    PDS_RETURN_IF_ERROR(check_peer(to));
    uint8_t h[kHeader] = {};
    put_le(h + 8, static_cast<uint64_t>(n), 8);
    iovec v[2] = {{h, kHeader}, {const_cast<float*>(data), static_cast<size_t>(n) * sizeof(float)}};
    return lost_if(net::send_all(fd_, v, n > 0 ? 2 : 1));
  }

  Status send_failure(int to, const Status& why) override {
    PDS_RETURN_IF_ERROR(check_peer(to));
    const Status w = why.is_ok() ? internal_error("stage failure without a reason") : why;
    const std::string text = w.message().substr(0, kMaxText);
    uint8_t h[kHeader] = {};
    put_le(h, static_cast<uint32_t>(static_cast<int32_t>(w.code())), 4);
    put_le(h + 4, text.size(), 4);
    iovec v[2] = {{h, kHeader}, {const_cast<char*>(text.data()), text.size()}};
    return lost_if(net::send_all(fd_, v, text.empty() ? 1 : 2));
  }

  Status recv(int from, float* data, int64_t n) override {
    PDS_RETURN_IF_ERROR(check_peer(from));
    uint8_t h[kHeader];
    PDS_RETURN_IF_ERROR(lost_if(recv_bytes(fd_, h, kHeader)));
    const int32_t code = static_cast<int32_t>(get_le(h, 4));
    const uint32_t text_len = static_cast<uint32_t>(get_le(h + 4, 4));
    const uint64_t count = get_le(h + 8, 8);
    if (text_len > kMaxText || (code != 0 && count != 0) || code < 0 || code > static_cast<int32_t>(ErrorCode::kDeadlineExceeded))
      return lost_if(Status(ErrorCode::kDataLoss, "malformed message header"));
    if (code != 0) {
      std::string text(text_len, '\0');
      PDS_RETURN_IF_ERROR(lost_if(recv_bytes(fd_, text.data(), text.size())));
      return Status(static_cast<ErrorCode>(code), text);
    }
    if (count != static_cast<uint64_t>(n)) {
      // Read the payload off so the link stays in step for the next micro-batch.
      std::vector<float> sink(static_cast<size_t>(std::min<uint64_t>(count, 1u << 20)));
      for (uint64_t left = count; left > 0;) {
        const uint64_t k = std::min<uint64_t>(left, sink.size());
        PDS_RETURN_IF_ERROR(lost_if(recv_bytes(fd_, sink.data(), k * sizeof(float))));
        left -= k;
      }
      return internal_error("stage channel: stage " + std::to_string(peer_) + " sent " + std::to_string(count) + " floats, stage " +
                            std::to_string(stage_) + " expected " + std::to_string(n));
    }
    return lost_if(recv_bytes(fd_, data, static_cast<size_t>(n) * sizeof(float)));
  }

 private:
  Status check_peer(int s) const {
    if (s != peer_) return invalid_argument("stage channel: stage " + std::to_string(stage_) + " links only to stage " + std::to_string(peer_) + " over the network, not " + std::to_string(s));
    return Status::ok();
  }
  // An I/O failure on the link: the node across it is gone (or the link is out of step).
  Status lost_if(const Status& st) const {
    if (st.is_ok()) return st;
    return Status(ErrorCode::kUnavailable, "the link from stage " + std::to_string(std::min(stage_, peer_)) + " to stage " +
                                               std::to_string(std::max(stage_, peer_)) + " (another node) failed: " + st.message());
  }
  int fd_, stage_, peer_, stages_;
};

// Copies one relayed link's bytes from its sender to its receiver until either end goes.
void relay(int from, int to) {
  std::vector<char> buf(1 << 16);
  while (true) {
    const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!send_bytes(to, buf.data(), static_cast<size_t>(n)).is_ok()) break;
  }
  // Either end gone: the other sees end-of-stream (or a failed send) instead of waiting.
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
}

}  // namespace

Result<std::unique_ptr<TcpStageHub>> TcpStageHub::listen(const std::string& host) {
  std::unique_ptr<TcpStageHub> h(new TcpStageHub());
  PDS_ASSIGN_OR_RETURN(net::Fd fd, net::listen_tcp(host, 0, &h->port_));
  h->fd_ = fd.release();
  std::random_device rd;
  for (auto& b : h->token_) b = static_cast<uint8_t>(rd() & 0xff);
  return h;
}

TcpStageHub::~TcpStageHub() {
  if (fd_ >= 0) ::close(fd_);
  for (int fd : relayed_) ::shutdown(fd, SHUT_RDWR);
  for (auto& t : relays_) t.join();
  for (int fd : relayed_) ::close(fd);
}

Result<std::vector<int>> TcpStageHub::accept_links(int nnodes, int tp, std::chrono::milliseconds timeout) {
  // ends[(boundary * tp + rank) * 2 + side]; boundary 0's sending ends are node 0's own.
  const int boundaries = nnodes - 1;
  std::vector<net::Fd> ends(static_cast<size_t>(boundaries * tp * 2));
  const int expected = tp + 2 * tp * (boundaries - 1);
  const auto deadline = Clock::now() + timeout;
  for (int joined = 0; joined < expected;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int rc = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (rc == 0)
      return Status(ErrorCode::kDeadlineExceeded, "pipeline stage links: " + std::to_string(joined) + " of " + std::to_string(expected) +
                                                      " connected to node 0 in time");
    if (rc < 0) continue;
    net::Fd conn(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    (void)net::tune(conn.get(), std::chrono::milliseconds(5000));
    uint8_t o[kOpening];
    if (!recv_bytes(conn.get(), o, sizeof(o)).is_ok() || std::memcmp(o, token_.data(), 16) != 0) continue;
    const uint64_t b = get_le(o + 16, 4), r = get_le(o + 20, 4), side = o[24];
    if (b >= static_cast<uint64_t>(boundaries) || r >= static_cast<uint64_t>(tp) || side > 1 || (b == 0 && side == 0)) continue;
    net::Fd& slot = ends[(b * tp + r) * 2 + side];
    if (slot.valid()) continue;
    steady(conn.get());
    slot = std::move(conn);
    ++joined;
  }
  ::close(fd_);
  fd_ = -1;
  std::vector<int> own(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) {
    own[r] = ends[r * 2 + 1].release();  // boundary 0: node 1's receiving end, node 0 sends into it
    steady(own[r]);
  }
  for (int b = 1; b < boundaries; ++b)
    for (int r = 0; r < tp; ++r) {
      const int from = ends[(b * tp + r) * 2].release(), to = ends[(b * tp + r) * 2 + 1].release();
      relayed_.push_back(from);
      relayed_.push_back(to);
      relays_.emplace_back(relay, from, to);
    }
  return own;
}

Result<int> connect_stage_link(const std::string& host, uint16_t port, const CollectiveToken& token, int boundary, int rank,
                               StageLinkSide side, std::chrono::milliseconds timeout) {
  PDS_ASSIGN_OR_RETURN(net::Fd fd, net::connect_tcp(host, port, timeout));
  uint8_t o[kOpening];
  std::memcpy(o, token.data(), 16);
  put_le(o + 16, static_cast<uint32_t>(boundary), 4);
  put_le(o + 20, static_cast<uint32_t>(rank), 4);
  o[24] = static_cast<uint8_t>(side);
  PDS_RETURN_IF_ERROR(send_bytes(fd.get(), o, sizeof(o)));
  steady(fd.get());
  return fd.release();
}

std::unique_ptr<StageChannel> make_tcp_stage_channel(int fd, int stage, int peer, int num_stages) {
  return std::make_unique<TcpStageChannel>(fd, stage, peer, num_stages);
}

}  // namespace pdserve::transfer
