// The ibverbs Fabric for the RDMA transport: opens each configured NIC, one protection
// domain per NIC, registers host memory once per NIC, and creates RC queue pairs addressed
// by the probed GID (RoCE) or LID (InfiniBand). COMPILED IN CI, NEVER RUN: no RDMA device has
// been available (docs/disaggregation.md, "RDMA").
#pragma once

#include <memory>
#include <vector>

#include "pdserve/transfer/rdma/fabric.h"
#include "pdserve/transfer/rdma/nic_config.h"

namespace pdserve::transfer::rdma {

// kUnavailable naming the NIC that is missing, down, or has no usable GID.
Result<std::unique_ptr<Fabric>> make_verbs_fabric(const std::vector<NicName>& nics, int gid_index);

}  // namespace pdserve::transfer::rdma
