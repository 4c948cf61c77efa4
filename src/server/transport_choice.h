// The server's side of the transport policy (internal): probe the configured RDMA NICs, let
// transfer/rdma/transport_policy.h decide, and keep what /get_server_info reports.
#pragma once

#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/disagg/disagg_config.h"

namespace pdserve::server {

struct TransportChoice {
  std::string backend;  // "tcp" or "rdma"
  std::string reason;   // logged at startup, /get_server_info's transport_choice
  Json rdma;            // devices, per-NIC state / link layer / GID, gid_index
};

// kUnavailable when --transfer-backend rdma cannot be had (names the NIC and what is wrong).
Result<TransportChoice> choose_transport(const disagg::DisaggConfig& d);

}  // namespace pdserve::server
