#include "pdserve/transfer/rank_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "link_util.h"
#include "socket_io.h"

namespace pdserve::transfer {

namespace {

using namespace link;
constexpr uint32_t kMaxId = 4096;

}  // namespace

Result<std::unique_ptr<RankBootstrapServer>> RankBootstrapServer::listen(const std::string& host, uint16_t port, RankBootstrapConfig cfg) {
  if (cfg.world_size < 1) return invalid_argument("rank bootstrap: world size must be at least 1");
  std::unique_ptr<RankBootstrapServer> s(new RankBootstrapServer());
  PDS_ASSIGN_OR_RETURN(net::Fd fd, net::listen_tcp(host, port, &s->port_));
  s->fd_ = fd.release();
  s->cfg_ = std::move(cfg);
  return s;
}

RankBootstrapServer::~RankBootstrapServer() {
  if (fd_ >= 0) ::close(fd_);
}

Status RankBootstrapServer::serve(const std::vector<uint8_t>& id) {
  if (id.empty() || id.size() > kMaxId) return invalid_argument("rank bootstrap: bad id size");
  const std::string id_str(id.begin(), id.end());
  const auto deadline = Clock::now() + cfg_.timeout;
  std::set<int> served;
  while (static_cast<int>(served.size()) < cfg_.world_size - 1) {
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left(deadline).count()));
    if (rc == 0 || Clock::now() >= deadline)
      return Status(ErrorCode::kDeadlineExceeded, "rank bootstrap: " + std::to_string(served.size()) + " of " +
                                                      std::to_string(cfg_.world_size - 1) + " ranks joined before the timeout");
    if (rc < 0) continue;  // EINTR
    net::Fd conn(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    // One peer at a time: a stalled one costs at most a few seconds of the budget.
    if (!net::tune(conn.get(), std::min(left(deadline), std::chrono::milliseconds(5000))).is_ok()) continue;
    auto join = read_join(conn.get(), cfg_.secret, "pdserve-rank-join");
    if (!join.is_ok()) continue;
    const uint32_t rank = join->rank;
    const bool rank_ok = rank >= 1 && rank < static_cast<uint32_t>(cfg_.world_size) && !served.count(static_cast<int>(rank));
    if (!join->accepted || !rank_ok) {
      ++refused_;
      (void)send_str(conn.get(), std::string(1, '\1'));
      continue;
    }
    const std::string answer = std::string(1, '\0') + u32_le(static_cast<uint32_t>(id_str.size())) + id_str +
                               mac(cfg_.secret, "pdserve-rank-id" + join->nc + join->ns + id_str);
    if (send_str(conn.get(), answer).is_ok()) served.insert(static_cast<int>(rank));
  }
  return Status::ok();
}

Result<std::vector<uint8_t>> fetch_rank_id(const std::string& host, uint16_t port, int rank, const RankBootstrapConfig& cfg) {
  if (rank < 1) return invalid_argument("rank bootstrap: only ranks >= 1 fetch the id (rank 0 makes it)");
  const std::string where = host + ":" + std::to_string(port);
  const auto deadline = Clock::now() + cfg.timeout;
  Status last = Status::ok();
  while (Clock::now() < deadline) {
    auto conn = net::connect_tcp(host, port, left(deadline));
    if (!conn.is_ok()) {
      last = conn.status();
      std::this_thread::sleep_for(std::min(left(deadline), std::chrono::milliseconds(100)));  // rank 0 may not listen yet
      continue;
    }
    const int fd = conn->get();
    PDS_RETURN_IF_ERROR(net::tune(fd, left(deadline)));
    PDS_ASSIGN_OR_RETURN(Join join, send_join(fd, static_cast<uint32_t>(rank), cfg.secret, "pdserve-rank-join"));
    if (!join.accepted)
      return invalid_argument("rank bootstrap: rank 0 at " + where + " refused rank " + std::to_string(rank) +
                              " (a different cluster secret, or the rank is taken or out of range)");
    PDS_ASSIGN_OR_RETURN(std::string len, recv_str(fd, 4));
    const uint32_t n = read_u32_le(len);
    if (n == 0 || n > kMaxId) return Status(ErrorCode::kDataLoss, "rank bootstrap: bad id length from " + where);
    PDS_ASSIGN_OR_RETURN(std::string id, recv_str(fd, n));
    PDS_ASSIGN_OR_RETURN(std::string mac_s, recv_str(fd, kMac));
    if (!cfg.secret.empty() && !constant_time_equal(mac_s, mac(cfg.secret, "pdserve-rank-id" + join.nc + join.ns + id)))
      return invalid_argument("rank bootstrap: the answer from " + where + " fails authentication (it holds a different cluster secret)");
    return std::vector<uint8_t>(id.begin(), id.end());
  }
  return Status(ErrorCode::kDeadlineExceeded, "rank bootstrap: rank 0 at " + where + " did not answer in time" +
                                                  (last.is_ok() ? std::string() : ": " + last.message()));
}

}  // namespace pdserve::transfer
