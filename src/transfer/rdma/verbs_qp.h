// ibverbs glue (internal): one RC queue pair with its own completion queue, brought from
// RESET to RTS with the peer's endpoint, posting RDMA WRITEs and polling completions; and
// host memory registration. COMPILED IN CI, NEVER RUN: no RDMA device has been available
// (docs/disaggregation.md, "RDMA"). The logic above it (write_poster.h) is tested with a fake.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

#include "pdserve/transfer/rdma/conn_info.h"
#include "pdserve/transfer/rdma/send_queue.h"
#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma {

class VerbsQp final : public SendQueue {
 public:
  // depth: most work requests in flight (the poster's max_outstanding) plus one.
  static Result<std::unique_ptr<VerbsQp>> create(ibv_context* ctx, ibv_pd* pd, int depth);
  ~VerbsQp() override;

  // What the peer needs to reach this QP; psn is chosen at random by the caller.
  QpEndpoint endpoint(uint32_t psn, uint16_t lid, const GidEntry& gid, uint16_t mtu) const;
  // RESET -> INIT -> RTR (with the peer's QPN, PSN, LID / GID) -> RTS. roce: address by GID
  // (global route), else by LID. Each failing step names itself and errno.
  Status connect(uint8_t port, const QpEndpoint& local, const QpEndpoint& remote, bool roce);

  Status post(const RdmaWrite& w) override;
  int poll(WorkCompletion* out, int max) override;

 private:
  VerbsQp() = default;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
};

struct MrDeleter {
  void operator()(ibv_mr* mr) const { if (mr) ibv_dereg_mr(mr); }
};
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;

// Registers a region for local reads and remote writes. GPU regions are refused with what
// would make them work (dma-buf / nvidia-peermem): GPU registration is not written yet.
Result<MrPtr> register_region(ibv_pd* pd, const MemoryRegion& region);

}  // namespace pdserve::transfer::rdma
