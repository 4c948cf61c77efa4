// ibverbs glue (internal): one RC queue pair with its own completion queue, brought from
// RESET to RTS with the peer's endpoint, posting RDMA WRITEs and polling completions; and
// host memory registration; the verbs Fabric (verbs_fabric.cpp) hands these to the RDMA
// transport. COMPILED IN CI, NEVER RUN: no RDMA device has been available
// (docs/disaggregation.md, "RDMA"). The logic above it (write_poster.h) is tested with a fake.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

#include "pdserve/transfer/rdma/conn_info.h"
#include "pdserve/transfer/rdma/fabric.h"
#include "pdserve/transfer/rdma/gpu_registration.h"
#include "pdserve/transfer/rdma/send_queue.h"
#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma {

// Where a queue pair's NIC port is reached: what endpoint() advertises and connect() uses.
struct PortAddress {
  uint8_t port = 1;
  uint16_t lid = 0;
  uint16_t mtu = 4096;
  GidEntry gid;
  bool roce = false;  // address by GID (global route), else by LID
};

class VerbsQp final : public QueuePair {
 public:
  // depth: most send work requests in flight; recv_depth: receives for immediates (0: none).
  static Result<std::unique_ptr<VerbsQp>> create(ibv_context* ctx, ibv_pd* pd, int depth, int recv_depth, const PortAddress& where);
  ~VerbsQp() override;

  // What the peer needs to reach this QP; the PSN was chosen at random at creation.
  QpEndpoint endpoint() const override;
  // RESET -> INIT -> RTR (with the peer's QPN, PSN, LID / GID) -> RTS. Each failing step
  // names itself and errno.
  Status connect(const QpEndpoint& remote) override;

  Status post(const RdmaWrite& w) override;
  int poll(WorkCompletion* out, int max) override;
  Status post_recv() override;
  int poll_recv(RecvCompletion* out, int max) override;
  void set_error() override;

 private:
  VerbsQp() = default;
  PortAddress where_;
  uint32_t psn_ = 0;
  ibv_cq* cq_ = nullptr;       // send completions
  ibv_cq* recv_cq_ = nullptr;  // write-with-immediate arrivals
  ibv_qp* qp_ = nullptr;
};

struct MrDeleter {
  void operator()(ibv_mr* mr) const { if (mr) ibv_dereg_mr(mr); }
};
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;

// Registers a host region for local reads and remote writes (GPU regions: register_gpu_region).
Result<MrPtr> register_region(ibv_pd* pd, const MemoryRegion& region);
// Registers a GPU region the way gpu_registration.h chose (verbs_gpu_mr.cpp).
Result<MrPtr> register_gpu_region(ibv_pd* pd, const MemoryRegion& region, GpuRegPath path);

}  // namespace pdserve::transfer::rdma
