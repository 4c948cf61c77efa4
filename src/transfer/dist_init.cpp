#include "pdserve/transfer/dist_init.h"

#include "pdserve/transfer/rank_bootstrap.h"

namespace pdserve::transfer {

Result<HostPort> parse_dist_init_addr(const std::string& addr) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("--dist-init-addr \"" + addr + "\": " + why + " (want HOST:PORT, the leader node's address)");
  };
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return bad("no HOST:PORT");
  HostPort hp;
  hp.host = addr.substr(0, colon);
  if (hp.host.front() == '[') {
    if (hp.host.back() != ']' || hp.host.size() < 3) return bad("unbalanced [ ] around an IPv6 address");
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  const std::string port = addr.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return bad("the port is not a number");
  const int p = std::stoi(port);
  if (p < 1 || p > 65535) return bad("the port must be in [1, 65535]");
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

Status validate_dist_init(const DistInit& d, int tp) {
  if (d.nnodes < 1 || d.nnodes > 64) return invalid_argument("--nnodes: must be in [1, 64], got " + std::to_string(d.nnodes));
  if (d.node_rank < 0 || d.node_rank >= d.nnodes)
    return invalid_argument("--node-rank: must be in [0, --nnodes) = [0, " + std::to_string(d.nnodes) + "), got " + std::to_string(d.node_rank));
  if (d.nnodes == 1) return Status::ok();
  if (tp % d.nnodes != 0)
    return invalid_argument("--tp " + std::to_string(tp) + " does not split evenly over --nnodes " + std::to_string(d.nnodes) +
                            " (every node runs tp / nnodes ranks)");
  if (d.addr.empty()) return invalid_argument("--dist-init-addr: required with --nnodes > 1 (HOST:PORT of node 0)");
  return parse_dist_init_addr(d.addr).status();
}

Result<std::vector<uint8_t>> share_group_id(const DistInit& d, const std::string& secret, std::chrono::milliseconds timeout,
                                            const std::function<Result<std::vector<uint8_t>>()>& make_id) {
  PDS_RETURN_IF_ERROR(validate_dist_init(d, d.nnodes));
  if (d.nnodes == 1) return make_id();
  PDS_ASSIGN_OR_RETURN(HostPort hp, parse_dist_init_addr(d.addr));
  RankBootstrapConfig cfg;
  cfg.secret = secret;
  cfg.timeout = timeout;
  cfg.world_size = d.nnodes;
  const std::string who = "node " + std::to_string(d.node_rank) + " of " + std::to_string(d.nnodes);
  if (d.node_rank == 0) {
    // Listen before making the id: a port already taken fails fast, before NCCL is loaded.
    auto server = RankBootstrapServer::listen(hp.host, hp.port, cfg);
    if (!server.is_ok())
      return Status(server.status().code(), who + " (leader): cannot listen on --dist-init-addr " + d.addr + ": " + server.status().message());
    PDS_ASSIGN_OR_RETURN(std::vector<uint8_t> id, make_id());
    if (Status st = (*server)->serve(id); !st.is_ok())
      return Status(st.code(), who + " (leader) at " + d.addr + ": " + st.message() +
                                   ((*server)->refused() ? " (" + std::to_string((*server)->refused()) + " refused: wrong cluster secret or node rank)" : ""));
    return id;
  }
  auto id = fetch_rank_id(hp.host, hp.port, d.node_rank, cfg);
  if (!id.is_ok())
    return Status(id.status().code(), who + ": no NCCL unique id from the leader at --dist-init-addr " + d.addr + " within " +
                                          std::to_string(timeout.count()) + " ms: " + id.status().message());
  return id;
}

}  // namespace pdserve::transfer
