// Which transport a prefill / decode server uses (--transfer-backend tcp|rdma|auto), decided
// from the configured NICs and what probing them found. Pure: the server probes, this decides.
//   tcp:  TCP, always.
//   rdma: RDMA, or a startup error naming each missing NIC / inactive port / missing GID.
//         Never falls back to TCP.
//   auto: RDMA when NICs are configured, every one is usable, this build carries the RDMA
//         data path and that data path has run on real NICs; else TCP. Either way `reason` says what was chosen and why, naming
//         the NICs, their link layer and GIDs, so the startup log answers "why TCP?".
#pragma once

#include <string>
#include <vector>

#include "pdserve/transfer/rdma/nic_probe.h"

namespace pdserve::transfer::rdma {

// The RDMA data path (queue pairs, registration, posting, the server wiring) is written and
// runs end to end over the in-process fake fabric (tests/disagg/pd_rdma_test.cpp), so an
// explicit --transfer-backend rdma is honoured. docs/disaggregation.md, "RDMA".
inline constexpr bool kRdmaDataPathBuilt = true;
// False until the data path has run on real NICs (docs/perf.md, "RDMA benchmark plan"):
// until then auto never picks rdma on its own, and says so; rdma must be asked for.
inline constexpr bool kRdmaRunOnRealNics = false;

struct TransportDecision {
  std::string backend;  // "tcp" or "rdma"
  std::string reason;   // one line for the log and /get_server_info
};

// kInvalidArgument for an unknown backend or a bad NIC list; kUnavailable when rdma was asked
// for and cannot be had.
Result<TransportDecision> decide_transport(const std::string& backend, const std::vector<NicName>& nics,
                                           const std::vector<PortReport>& reports, const DeviceList& here,
                                           bool data_path_built = kRdmaDataPathBuilt,
                                           bool run_on_real_nics = kRdmaRunOnRealNics);

}  // namespace pdserve::transfer::rdma
