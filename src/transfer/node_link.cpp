// The node control stream's connections: the authenticated opening (node_link.h) and frame
// send / receive over blocking sockets.
#include "pdserve/transfer/node_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include "link_util.h"
#include "socket_io.h"

namespace pdserve::transfer::node {

namespace {

using namespace link;
constexpr auto kIoTimeout = std::chrono::milliseconds(30000);

// Header then payload; the header is checked before the payload is read.
Result<Frame> read_frame(int fd) {
  uint8_t h[kHeaderBytes];
  bool idle = false;
  PDS_RETURN_IF_ERROR(net::recv_exact_once(fd, h, kHeaderBytes, false, &idle));
  PDS_ASSIGN_OR_RETURN(Header header, decode_header(h));
  Frame f;
  f.type = header.type;
  f.payload.resize(header.length);
  if (header.length > 0) PDS_RETURN_IF_ERROR(net::recv_exact_once(fd, f.payload.data(), header.length, false, &idle));
  return f;
}

}  // namespace

Result<std::unique_ptr<LeaderLink>> LeaderLink::listen(const std::string& host, uint16_t port, int nnodes, std::string secret) {
  std::unique_ptr<LeaderLink> l(new LeaderLink());
  PDS_ASSIGN_OR_RETURN(net::Fd fd, net::listen_tcp(host, port, &l->port_));
  l->listen_fd_ = fd.release();
  l->nnodes_ = nnodes;
  l->secret_ = std::move(secret);
  l->fds_.assign(static_cast<size_t>(std::max(nnodes - 1, 0)), -1);
  return l;
}

LeaderLink::~LeaderLink() {
  stop_watching();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

Status LeaderLink::accept_followers(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int joined = 0;
  while (joined < nnodes_ - 1) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left(deadline).count()));
    if (rc == 0 || Clock::now() >= deadline) {
      std::string missing;
      for (size_t i = 0; i < fds_.size(); ++i)
        if (fds_[i] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(i + 1);
      return Status(ErrorCode::kDeadlineExceeded, "node 0: node(s) " + missing + " did not join within " + std::to_string(timeout.count()) +
                                                      " ms (" + std::to_string(refused_) + " connection(s) refused)");
    }
    if (rc < 0) continue;  // EINTR
    net::Fd conn(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    if (!net::tune(conn.get(), std::min(left(deadline), std::chrono::milliseconds(5000))).is_ok()) continue;
    auto join = read_join(conn.get(), secret_, "pdserve-node-join");
    if (!join.is_ok()) continue;
    const uint32_t rank = join->rank;
    const bool rank_ok = rank >= 1 && rank < static_cast<uint32_t>(nnodes_) && fds_[rank - 1] < 0;
    if (!join->accepted || !rank_ok) {
      ++refused_;
      (void)send_str(conn.get(), std::string(1, '\1'));
      continue;
    }
    if (!send_str(conn.get(), std::string(1, '\0') + mac(secret_, "pdserve-node-lead" + join->nc + join->ns)).is_ok()) continue;
    (void)net::tune(conn.get(), kIoTimeout);
    (void)net::set_recv_timeout(conn.get(), std::chrono::milliseconds(0));  // steps may be far apart
    fds_[rank - 1] = conn.release();
    ++joined;
  }
  ::close(listen_fd_);  // nobody else may join a running instance
  listen_fd_ = -1;
  return Status::ok();
}

Status LeaderLink::fail(const Status& why) {
  std::lock_guard<std::mutex> l(mu_);
  if (broken_.is_ok()) broken_ = why;
  return broken_;
}

Status LeaderLink::broadcast(const std::string& frame) {
  for (int node = 1; node < nnodes_; ++node) PDS_RETURN_IF_ERROR(send_to(node, frame));
  return Status::ok();
}

Status LeaderLink::send_to(int node, const std::string& frame) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!broken_.is_ok()) return broken_;
  }
  if (node < 1 || node > static_cast<int>(fds_.size())) return internal_error("node control: no node " + std::to_string(node));
  if (Status st = send_str(fds_[node - 1], frame); !st.is_ok())
    return fail(Status(ErrorCode::kUnavailable, "node " + std::to_string(node) + " of " + std::to_string(nnodes_) +
                                                    " left the instance (control stream: " + st.message() + ")"));
  return Status::ok();
}

void LeaderLink::watch(std::function<void(const Status&)> on_lost) {
  stop_watching();
  watching_.store(true);
  watcher_ = std::thread([this, on_lost = std::move(on_lost)] {
    std::vector<pollfd> p;
    for (int fd : fds_) p.push_back(pollfd{fd, POLLIN | POLLRDHUP, 0});
    while (watching_.load()) {
      if (::poll(p.data(), p.size(), 100) <= 0) continue;
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i].revents == 0) continue;
        const bool hangup = (p[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
        if (!hangup && (replies_.load() || !unread_out_of_turn(fds_[i]))) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a reply the engine thread is reading
          continue;
        }
        const std::string why = (p[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) ? "its control stream ended" : "it sent data out of turn";
        on_lost(fail(Status(ErrorCode::kUnavailable, "node " + std::to_string(i + 1) + " of " + std::to_string(nnodes_) +
                                                         " left the instance (" + why + ")")));
        return;
      }
    }
  });
}

// poll() saw bytes while no reply window was open. That alone proves nothing: the engine may
// have read them and closed its window between the poll and the check (seen under load). Out
// of turn only if bytes still wait unread after a pause in which no window opened or closed.
bool LeaderLink::unread_out_of_turn(int fd) {
  const uint64_t epoch = reply_epoch_.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  char c;
  const bool unread = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  return unread && !replies_.load() && reply_epoch_.load() == epoch;
}

void LeaderLink::stop_watching() {
  watching_.store(false);
  if (watcher_.joinable()) watcher_.join();
}

Result<std::vector<Frame>> LeaderLink::receive_from_all(std::chrono::milliseconds timeout) {
  std::vector<Frame> out;
  for (size_t i = 0; i < fds_.size(); ++i) {
    (void)net::set_recv_timeout(fds_[i], timeout);
    auto f = read_frame(fds_[i]);
    (void)net::set_recv_timeout(fds_[i], std::chrono::milliseconds(0));
    if (!f.is_ok())
      return Status(f.status().code() == ErrorCode::kDataLoss ? ErrorCode::kDataLoss : ErrorCode::kUnavailable,
                    "node " + std::to_string(i + 1) + " of " + std::to_string(nnodes_) + ": " + f.status().message());
    out.push_back(std::move(*f));
  }
  return out;
}

Result<Frame> LeaderLink::receive_from(int node, std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!broken_.is_ok()) return broken_;
  }
  if (node < 1 || node > static_cast<int>(fds_.size())) return internal_error("node control: no node " + std::to_string(node));
  const int fd = fds_[node - 1];
  (void)net::set_recv_timeout(fd, timeout);
  auto f = read_frame(fd);
  (void)net::set_recv_timeout(fd, std::chrono::milliseconds(0));
  if (!f.is_ok())
    return fail(Status(ErrorCode::kUnavailable, "node " + std::to_string(node) + " of " + std::to_string(nnodes_) +
                                                    " left the instance (control stream: " + f.status().message() + ")"));
  return f;
}

Result<std::unique_ptr<FollowerLink>> FollowerLink::connect(const std::string& host, uint16_t port, int node_rank, const std::string& secret,
                                                            std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  const auto deadline = Clock::now() + timeout;
  Status last = Status::ok();
  while (Clock::now() < deadline) {
    auto conn = net::connect_tcp(host, port, left(deadline));
    if (!conn.is_ok()) {
      last = conn.status();
      std::this_thread::sleep_for(std::min(left(deadline), std::chrono::milliseconds(100)));  // the leader may not listen yet
      continue;
    }
    const int fd = conn->get();
    PDS_RETURN_IF_ERROR(net::tune(fd, std::min(left(deadline), kIoTimeout)));
    PDS_ASSIGN_OR_RETURN(Join join, send_join(fd, static_cast<uint32_t>(node_rank), secret, "pdserve-node-join"));
    if (!join.accepted)
      return invalid_argument("the leader at " + where + " refused node " + std::to_string(node_rank) +
                              " (a different cluster secret, or the node rank is taken or out of range)");
    PDS_ASSIGN_OR_RETURN(std::string mac_s, recv_str(fd, kMac));
    if (!secret.empty() && !constant_time_equal(mac_s, mac(secret, "pdserve-node-lead" + join.nc + join.ns)))
      return invalid_argument("the leader at " + where + " fails authentication (it holds a different cluster secret)");
    (void)net::tune(fd, kIoTimeout);
    (void)net::set_recv_timeout(fd, std::chrono::milliseconds(0));
    std::unique_ptr<FollowerLink> l(new FollowerLink());
    l->fd_ = conn->release();
    return l;
  }
  return Status(ErrorCode::kDeadlineExceeded, "no leader answered at --dist-init-addr " + where + " within " + std::to_string(timeout.count()) +
                                                  " ms" + (last.is_ok() ? std::string() : ": " + last.message()));
}

FollowerLink::~FollowerLink() {
  stop_watching();
  if (fd_ >= 0) ::close(fd_);
}

void FollowerLink::watch(std::function<void(const Status&)> on_lost) {
  stop_watching();
  watching_.store(true);
  watcher_done_.store(false);
  watcher_ = std::thread([this, on_lost = std::move(on_lost)] {
    struct Done {
      std::atomic<bool>& d;
      ~Done() { d.store(true); }
    } done{watcher_done_};
    // POLLRDHUP only: the leader's next step frame (POLLIN) is the main loop's business.
    pollfd p{fd_, POLLRDHUP, 0};
    while (watching_.load()) {
      if (::poll(&p, 1, 100) <= 0 || p.revents == 0) continue;
      // A leader that stops normally sends Shutdown, then closes, right after its last step:
      // this node may still be finishing that step, which must not count as a loss.
      uint8_t head[kHeaderBytes];
      const ssize_t n = ::recv(fd_, head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
      if (n == static_cast<ssize_t>(sizeof(head))) {
        auto h = decode_header(head);
        if (h.is_ok() && h->type == MsgType::kShutdown) return;  // receive() reads it
      }
      on_lost(Status(ErrorCode::kUnavailable, "the leader's control stream ended (its process is gone)"));
      return;
    }
  });
}

void FollowerLink::stop_watching() {
  watching_.store(false);
  if (watcher_.joinable()) watcher_.join();
}

Result<Frame> FollowerLink::receive(std::chrono::milliseconds idle_timeout) {
  (void)net::set_recv_timeout(fd_, idle_timeout);
  return read_frame(fd_);
}

Status FollowerLink::send(const std::string& frame) { return send_str(fd_, frame); }

}  // namespace pdserve::transfer::node
