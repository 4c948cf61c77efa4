// Which transport a prefill / decode server uses (--transfer-backend tcp|rdma|auto), decided
// from the configured NICs and what probing them found. Pure: the server probes, this decides.
//   tcp:  TCP, always.
//   rdma: RDMA, or a startup error naming each missing NIC / inactive port / missing GID.
//         Never falls back to TCP.
//   auto: RDMA when NICs are configured, every one is usable and this build carries the
//         RDMA data path; else TCP. Either way `reason` says what was chosen and why, naming
//         the NICs, their link layer and GIDs, so the startup log answers "why TCP?".
#pragma once

#include <string>
#include <vector>

#include "pdserve/transfer/rdma/nic_probe.h"

namespace pdserve::transfer::rdma {

// False until the RDMA data path (queue pairs, registration, posting) is finished and has
// run on real NICs: see docs/disaggregation.md, "RDMA". While false, rdma is refused and
// auto picks tcp, saying so.
inline constexpr bool kRdmaDataPathBuilt = false;

struct TransportDecision {
  std::string backend;  // "tcp" or "rdma"
  std::string reason;   // one line for the log and /get_server_info
};

// kInvalidArgument for an unknown backend or a bad NIC list; kUnavailable when rdma was asked
// for and cannot be had.
Result<TransportDecision> decide_transport(const std::string& backend, const std::vector<NicName>& nics,
                                           const std::vector<PortReport>& reports, const DeviceList& here,
                                           bool data_path_built = kRdmaDataPathBuilt);

}  // namespace pdserve::transfer::rdma
