// The thin layer over ibverbs that the RDMA poster uses: one send queue of one connected RC
// QP (one peer, one NIC) and its completion queue. verbs_send_queue.cpp wraps
// ibv_post_send / ibv_poll_cq; the tests use a fake, so posting and completion logic is
// tested without a device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pdserve/core/status.h"

namespace pdserve::transfer::rdma {

// One RDMA WRITE (with an immediate when imm is set). Addresses are virtual addresses in
// registered memory; keys are the NIC's for that memory.
struct RdmaWrite {
  uint64_t wr_id = 0;
  uint64_t local_addr = 0;
  uint32_t lkey = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  std::optional<uint32_t> imm;
};

struct WorkCompletion {
  uint64_t wr_id = 0;
  bool ok = true;
  std::string error;  // ibv_wc_status_str when !ok
};

class SendQueue {
 public:
  virtual ~SendQueue() = default;
  // Every write is posted signaled (one completion each). An error means the QP cannot take
  // work (it is in the error state or full); the poster treats it like an error completion.
  virtual Status post(const RdmaWrite& w) = 0;
  // Non-blocking: up to max completions into out; their count.
  virtual int poll(WorkCompletion* out, int max) = 0;
};

}  // namespace pdserve::transfer::rdma
