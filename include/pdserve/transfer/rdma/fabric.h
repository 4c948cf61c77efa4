// What the RDMA transport needs from the NICs, as a thin interface: memory registration (a
// key per NIC), and reliable-connected queue pairs that post RDMA WRITEs (SendQueue) and
// receive write-with-immediate notifications. The ibverbs implementation sits on
// verbs_qp.h; tests use an in-process fake "wire" (tests/transfer/rdma/fake_fabric.h) that
// applies writes to the other side's registered memory the way an HCA checks an rkey.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/transfer/rdma/conn_info.h"
#include "pdserve/transfer/rdma/send_queue.h"
#include "pdserve/transfer/rdma/write_poster.h"
#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma {

// One write-with-immediate that arrived (it consumed one posted receive).
struct RecvCompletion {
  uint32_t imm = 0;
  bool ok = true;
  std::string error;
};

class QueuePair : public SendQueue {
 public:
  // What the peer needs to reach this QP (QPN, PSN, LID / GID, MTU).
  virtual QpEndpoint endpoint() const = 0;
  // RESET -> INIT -> RTR -> RTS against the peer's endpoint.
  virtual Status connect(const QpEndpoint& remote) = 0;
  // One receive for one incoming write-with-immediate (the payload itself lands by RDMA).
  virtual Status post_recv() = 0;
  virtual int poll_recv(RecvCompletion* out, int max) = 0;
  // Moves the QP to the error state: nothing more lands through it (used when a revoke
  // cannot be confirmed by the peer).
  virtual void set_error() = 0;
};

// A registered memory range; deregistered when destroyed.
class Registration {
 public:
  virtual ~Registration() = default;
  virtual const MrKeys& keys() const = 0;  // addr, size, and the local key (lkey) on each NIC
  // The keys a peer writes with (rkey per NIC); the same as the lkeys unless a NIC differs.
  virtual std::vector<uint32_t> rkeys() const { return keys().keys; }
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  virtual int nics() const = 0;
  virtual std::string describe() const = 0;  // for logs: "fake(2 NICs)", "verbs(mlx5_0:1 ...)"
  // Registers for local reads and remote writes on every NIC (GPU regions too where
  // gpu_registration() is ok).
  virtual Result<std::unique_ptr<Registration>> register_memory(const MemoryRegion& region) = 0;
  // How GPU memory would be registered (a line for the log), or why it cannot be
  // (gpu_registration.h). Host memory needs nothing of this.
  virtual Result<std::string> gpu_registration() { return unsupported("this fabric registers host memory only"); }
  // depth: most send work requests in flight; recv_depth: receives it may hold.
  virtual Result<std::unique_ptr<QueuePair>> create_qp(int nic, int depth, int recv_depth) = 0;
};

}  // namespace pdserve::transfer::rdma
