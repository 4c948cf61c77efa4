// The CPU backend's cross-process collectives: a star around rank 0 (tcp_collective.h).
// Each exchange starts with a 16-byte tag (op u64, n u64) so ranks out of step are noticed
// instead of adding unrelated buffers.
#include "pdserve/transfer/tcp_collective.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>

#include "socket_io.h"

namespace pdserve::transfer {

namespace {

using Clock = std::chrono::steady_clock;
enum : uint64_t { kAllReduce = 1, kAllGather = 2 };

using net::recv_bytes;
using net::send_bytes;

class TcpStarCommunicator final : public Communicator {
 public:
  // Rank 0: fds[i] is rank i + 1's connection. Other ranks: fds = {connection to rank 0}.
  TcpStarCommunicator(int rank, int world, std::vector<int> fds) : rank_(rank), world_(world), fds_(std::move(fds)) {}
  ~TcpStarCommunicator() override {
    for (int fd : fds_) ::close(fd);
  }
  int rank() const override { return rank_; }
  int size() const override { return world_; }
  Status health() const override {
    std::lock_guard<std::mutex> l(mu_);
    return broken_;
  }

  void all_reduce_sum(float* data, int64_t n) override {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    // Once broken the result is zeros: the forward runs on to its end, and zeros (unlike
    // stale or half-received bytes) cannot turn into NaNs that upset routing or sampling.
    ZeroIfBroken zero{this, data, bytes};
    if (!healthy()) return;
    if (rank_ != 0) {
      exchange_as_peer(kAllReduce, n, data, bytes, data, bytes);
      return;
    }
    std::vector<float> theirs(static_cast<size_t>(world_ - 1) * n);
    for (int r = 1; r < world_; ++r)
      if (!receive_tagged(r, kAllReduce, n, theirs.data() + (r - 1) * n, bytes)) return;
    for (int64_t i = 0; i < n; ++i) {
      float s = 0;  // the in-process group's order: 0 + rank 0 + rank 1 + ...
      s += data[i];
      for (int r = 1; r < world_; ++r) s += theirs[(r - 1) * n + i];
      data[i] = s;
    }
    send_all_peers(data, bytes);
  }

  void all_gather(const float* in, int64_t n, float* out) override {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    ZeroIfBroken zero{this, out, bytes * world_};
    if (!healthy()) return;
    if (rank_ != 0) {
      exchange_as_peer(kAllGather, n, in, bytes, out, bytes * world_);
      return;
    }
    std::memcpy(out, in, bytes);
    for (int r = 1; r < world_; ++r)
      if (!receive_tagged(r, kAllGather, n, out + r * n, bytes)) return;
    send_all_peers(out, bytes * world_);
  }

 private:
  bool healthy() const { return health().is_ok(); }

  struct ZeroIfBroken {
    const TcpStarCommunicator* self;
    float* data;
    size_t bytes;
    ~ZeroIfBroken() {
      if (!self->healthy()) std::memset(data, 0, bytes);
    }
  };

  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!broken_.is_ok()) return;
      broken_ = Status(ErrorCode::kUnavailable, "tensor-parallel rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ": " + why);
    }
    // Wake every rank still waiting on us (rank 0 waits on all, the others on rank 0).
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }

  void exchange_as_peer(uint64_t op, int64_t n, const void* mine, size_t mine_bytes, void* result, size_t result_bytes) {
    const uint64_t tag[2] = {op, static_cast<uint64_t>(n)};
    Status st = send_bytes(fds_[0], tag, sizeof(tag));
    if (st.is_ok()) st = send_bytes(fds_[0], mine, mine_bytes);
    if (st.is_ok()) st = recv_bytes(fds_[0], result, result_bytes);
    if (!st.is_ok()) fail("lost rank 0 (" + st.message() + ")");
  }

  bool receive_tagged(int r, uint64_t op, int64_t n, void* into, size_t bytes) {
    uint64_t tag[2] = {0, 0};
    Status st = recv_bytes(fds_[r - 1], tag, sizeof(tag));
    if (st.is_ok() && (tag[0] != op || tag[1] != static_cast<uint64_t>(n)))
      st = Status(ErrorCode::kDataLoss, "out of step (another collective or size)");
    if (st.is_ok()) st = recv_bytes(fds_[r - 1], into, bytes);
    if (!st.is_ok()) {
      fail("lost rank " + std::to_string(r) + " (" + st.message() + ")");
      return false;
    }
    return true;
  }

  void send_all_peers(const void* p, size_t bytes) {
    for (int r = 1; r < world_; ++r)
      if (Status st = send_bytes(fds_[r - 1], p, bytes); !st.is_ok()) return fail("lost rank " + std::to_string(r) + " (" + st.message() + ")");
  }

  int rank_, world_;
  std::vector<int> fds_;
  mutable std::mutex mu_;
  Status broken_ = Status::ok();
};

// No timeouts in steady state: a collective waits as long as the slowest rank computes; a
// vanished process is noticed by end-of-stream, a vanished host by TCP_USER_TIMEOUT.
void steady(int fd) {
  (void)net::tune(fd, std::chrono::milliseconds(30000));
  (void)net::set_recv_timeout(fd, std::chrono::milliseconds(0));
  timeval none{0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
}

}  // namespace

Result<std::unique_ptr<TcpCollectiveListener>> TcpCollectiveListener::listen(const std::string& host, int world_size) {
  if (world_size < 2) return invalid_argument("tcp collective: a group of " + std::to_string(world_size) + " rank(s) needs no network");
  std::unique_ptr<TcpCollectiveListener> l(new TcpCollectiveListener());
  PDS_ASSIGN_OR_RETURN(net::Fd fd, net::listen_tcp(host, 0, &l->port_));
  l->fd_ = fd.release();
  l->world_ = world_size;
  std::random_device rd;
  for (auto& b : l->token_) b = static_cast<uint8_t>(rd() & 0xff);
  return l;
}

TcpCollectiveListener::~TcpCollectiveListener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<Communicator>> TcpCollectiveListener::accept_ranks(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<int> fds(static_cast<size_t>(world_ - 1), -1);
  auto close_all = [&] {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  };
  int joined = 0;
  while (joined < world_ - 1) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int rc = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (rc == 0) {
      close_all();
      return Status(ErrorCode::kDeadlineExceeded, "tcp collective: " + std::to_string(joined) + " of " + std::to_string(world_ - 1) +
                                                      " ranks connected to rank 0 in time");
    }
    if (rc < 0) continue;
    net::Fd conn(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    (void)net::tune(conn.get(), std::chrono::milliseconds(5000));
    uint8_t hello[16 + 4];
    if (!recv_bytes(conn.get(), hello, sizeof(hello)).is_ok()) continue;
    uint32_t rank = 0;
    for (int i = 0; i < 4; ++i) rank |= static_cast<uint32_t>(hello[16 + i]) << (8 * i);
    if (std::memcmp(hello, token_.data(), 16) != 0 || rank < 1 || rank >= static_cast<uint32_t>(world_) || fds[rank - 1] >= 0) continue;
    steady(conn.get());
    fds[rank - 1] = conn.release();
    ++joined;
  }
  ::close(fd_);
  fd_ = -1;
  return std::unique_ptr<Communicator>(new TcpStarCommunicator(0, world_, std::move(fds)));
}

Result<std::unique_ptr<Communicator>> connect_tcp_collective(const std::string& host, uint16_t port, int rank, int world_size,
                                                             const CollectiveToken& token, std::chrono::milliseconds timeout) {
  if (rank < 1 || rank >= world_size) return invalid_argument("tcp collective: rank " + std::to_string(rank) + " connects only as 1.." + std::to_string(world_size - 1));
  PDS_ASSIGN_OR_RETURN(net::Fd fd, net::connect_tcp(host, port, timeout));
  uint8_t hello[16 + 4];
  std::memcpy(hello, token.data(), 16);
  for (int i = 0; i < 4; ++i) hello[16 + i] = static_cast<uint8_t>((static_cast<uint32_t>(rank) >> (8 * i)) & 0xff);
  PDS_RETURN_IF_ERROR(send_bytes(fd.get(), hello, sizeof(hello)));
  steady(fd.get());
  return std::unique_ptr<Communicator>(new TcpStarCommunicator(rank, world_size, {fd.release()}));
}

}  // namespace pdserve::transfer
