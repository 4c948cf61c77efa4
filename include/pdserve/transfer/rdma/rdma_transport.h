// RDMA transport behind the Transport interface. NEVER RUN ON A REAL NIC: tested end to end
// in-process over a fake fabric only (docs/disaggregation.md, "RDMA").
//
// Per peer: one control connection (TCP, opened by the sender, authenticated by the TCP
// transport's hello handshake with the cluster secret before any RDMA detail is exchanged)
// and one RC queue pair per NIC. Over the control connection the two sides swap connection
// info (QP endpoints; decode's regions with their rkeys and its notification ring), decode
// pushes every grant and revoke, the sender acks revokes once nothing of the room is in
// flight, and decode returns notification-ring credits.
//
// Data moves by one-sided RDMA WRITE, striped over the NICs (stripe_plan.h, write_poster.h);
// the sender checks each write against decode's grants before posting, since decode's CPU
// sees no write. A batch's notification is a write-with-immediate into a slot of decode's
// ring (immediate = slot), posted only after every data write of the batch completed;
// decode checks it (AccessTable::admit_notify) and calls on_notify. One completion thread
// per NIC polls every queue pair on that NIC. Regions are registered before open_peer (the
// sender's) or before the peer connects (decode's): both are exchanged at connect time.
#pragma once

#include <memory>

#include "pdserve/transfer/rdma/fabric.h"
#include "pdserve/transfer/rdma/nic_config.h"
#include "pdserve/transfer/tcp_transport.h"

namespace pdserve::transfer::rdma {

// Region ids the transport keeps for itself (user regions must stay below kFirstReservedRegion).
constexpr RegionId kFirstReservedRegion = 0xFFFFFF00u;
constexpr RegionId kNotifyRingRegion = 0xFFFFFFFFu;     // decode's ring, as the sender sees it
constexpr RegionId kNotifyStagingRegion = 0xFFFFFFFEu;  // the sender's copy of outgoing notifications

struct RdmaTransportConfig {
  // The control listener and its authentication: listen_host / listen_port, connect and io
  // timeouts, the cluster secret, limits.max_notify_bytes, max_outstanding_batches.
  TcpConfig control;
  RdmaConfig rdma;
  int notify_slots = 64;  // per peer: notifications posted and not yet consumed by decode

  Status validate() const;
};

// The fabric supplies the NICs (verbs, or a fake in tests).
Result<std::unique_ptr<Transport>> make_rdma_transport(const RdmaTransportConfig& config, std::unique_ptr<Fabric> fabric);

}  // namespace pdserve::transfer::rdma
