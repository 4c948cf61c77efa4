// The server's side of the transport policy (internal): probe the configured RDMA NICs, let
// transfer/rdma/transport_policy.h decide, and keep what /get_server_info reports.
#pragma once

#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/disagg/disagg_config.h"
#include "pdserve/server/http_server.h"

namespace pdserve::server {

struct TransportChoice {
  std::string backend;  // "tcp" or "rdma"
  std::string reason;   // logged at startup, /get_server_info's transport_choice
  Json rdma;            // devices, per-NIC state / link layer / GID, gid_index
};

// kUnavailable when --transfer-backend rdma cannot be had (names the NIC and what is wrong).
// hooks' list_devices / probe_nics replace libibverbs' where set (tests).
Result<TransportChoice> choose_transport(const disagg::DisaggConfig& d, const HttpServer::RdmaHooks& hooks = {});

// The role's transport as chosen: TCP (through make_tcp where set), or RDMA over the fabric
// hooks.make_fabric opens (default: the verbs fabric on --rdma-nics), its control listener
// configured like TCP's. A fabric that cannot be opened is a startup error naming the NICs.
Result<std::unique_ptr<transfer::Transport>> make_role_transport(const TransportChoice& choice, const disagg::DisaggConfig& d,
                                                                 const transfer::TcpConfig& tcp,
                                                                 const HttpServer::TransportFactory& make_tcp,
                                                                 const HttpServer::RdmaHooks& hooks);

}  // namespace pdserve::server
